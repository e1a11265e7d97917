"""Measuring another CPU class on this machine.

A CPU with AVX-512 can be made to run the kernels an AVX2-only CPU (most
laptops, many cloud machines) would run, by limiting the libraries torch
dispatches to: ATen, oneDNN and MKL, and fbgemm (the quantized engine behind
--fp16-weights). Each reads its variable once, when it loads, so the
variables must be set before torch is imported: `reexec_with_isa` starts the
same command again with them set. Torch-free, so a front end may call it first.

Two AVX2 classes: `avx2` (AVX2 alone: AMD before Zen 4, Intel before Alder Lake)
and `avxvnni` (AVX2 with AVX-VNNI, whose dpbusd our 4-bit kernel uses: Intel's
CPUs from Alder Lake on). Both limit the libraries alike.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

_AVX2_LIBRARIES = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                   "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2"}
ISA_ENV: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {**_AVX2_LIBRARIES, "RACER_QUANT_ISA": "avx2"},  # our kernels: the 4-bit one and the attention
    # AVX2 with AVX-VNNI (Intel's CPUs from Alder Lake on, most without AVX-512): our 4-bit kernel's integer
    # dots take VNNI's dpbusd there; the libraries as for avx2
    "avxvnni": {**_AVX2_LIBRARIES, "RACER_QUANT_ISA": "avxvnni"},
}
ISA_CHOICES = tuple(ISA_ENV)
_MARK = "RACER_CPU_CLASS"


def isa_active(isa: str) -> bool:
    """Whether this process already runs with `isa`'s variables set."""
    return all(os.environ.get(k) == v for k, v in ISA_ENV[isa].items())


def reexec_with_isa(isa: str, argv: Sequence[str] | None = None) -> None:
    """Replace this process by the same command with `isa`'s variables set,
    unless they are set already (then return). Call before importing torch."""
    if isa_active(isa) or os.environ.get(_MARK) == isa:
        return
    env = {**os.environ, **ISA_ENV[isa], _MARK: isa}
    # orig_argv keeps `-m module` and interpreter flags, which argv loses.
    args = list(sys.orig_argv[1:] if argv is None else argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *args], env)


def limit_here(isa: str) -> None:
    """Set `isa`'s variables in this process, for the libraries not loaded yet
    (the test suite's switch, tests/conftest.py); refused once torch is loaded,
    since its libraries would keep the limits they read."""
    if isa not in ISA_ENV:
        raise ValueError(f"unknown CPU class {isa!r}: one of {', '.join(ISA_CHOICES)}")
    if "torch" in sys.modules and not isa_active(isa):
        raise RuntimeError(f"CPU class {isa}: torch is already loaded, so its libraries keep their own limits")
    os.environ.update(ISA_ENV[isa])
    os.environ[_MARK] = isa


def limits() -> list[str]:
    """The library limits this process runs under, as `NAME=value` (none natively)."""
    return [f"{k}={os.environ[k]}" for k in ISA_ENV["avx2"] if k in os.environ]


def capability() -> str:
    """The class torch's kernels run in a word: 'AVX512', or 'AVX2 (limited)' under the limits."""
    import torch

    return torch.backends.cpu.get_cpu_capability() + (" (limited)" if limits() else "")


def describe() -> str:
    """The CPU class torch runs with, e.g. 'AVX512 (native)' or 'AVX2 (limited)'."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    return f"{capability} ({'limited: ' + ' '.join(limits()) if limits() else 'native'})"
