"""Linear weights laid out once for the CPU's matrix library (oneDNN).

`F.linear` on a CPU hands the plain (out, in) matrix to the matrix library,
which for two or more rows repacks it into its blocked layout on every call:
on a small model that repacking is most of a multi-token step, so verifying
2-8 tokens cost about twice one token. oneDNN can pack a weight once
(`torch.ops.mkldnn._reorder_linear_weight`, the op torch's compiler uses when
it freezes weights) and multiply with the packed weight afterwards
(`_linear_pointwise`), one row or many. Measured against MKL's packed GEMM
(packed for one batch size only, so any other tree size falls back to the
plain weight) and torch.compile with freezing (the same oneDNN ops plus a
compile per shape): docs/design.md, "Packed weights".

These ops are private to torch, so `packing_works` checks on a probe that they
exist and agree with `F.linear` before any weight is packed; where they do not,
the lean forward keeps `F.linear` and says so in one log line.
"""

from __future__ import annotations

import functools
import logging
import os

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

DISABLE_ENV = "RACER_PACKED_WEIGHTS"
"""Set to 0 to keep F.linear on the plain weights (for comparisons)."""
PROBE_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}
"""Largest |packed - F.linear| on the probe, relative to the largest |output|."""


def _ops_present() -> bool:
    mkldnn = torch.ops.mkldnn
    return (torch.backends.mkldnn.is_available() and hasattr(mkldnn, "_reorder_linear_weight")
            and hasattr(mkldnn, "_linear_pointwise"))


def _reorder(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight, None)


def _multiply(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


_PROBE_ROWS = 64
_PROBE_COUNTS = {torch.float32: (8,), torch.bfloat16: (3, 4, 5, 8, 12, 16, 17, 24, 31, 32, 33, 48, 64)}
"""The call sizes probed: fp32 has shown one path for every count; bf16 more than one."""
_PATHS: dict[tuple[int, int, torch.dtype], tuple[bool, int | None]] = {}
"""Per weight shape and dtype: whether oneDNN gives a lone row other bits than
the same row beside others, and the most rows a call gives each row its own
bits for (None: every count probed)."""


def _paths(packed: torch.Tensor, key: tuple[int, int, torch.dtype]) -> tuple[bool, int | None]:
    """Probe how oneDNN multiplies rows of this shape: each row's bits in a
    call of two (the usual path) against the row alone and against calls of
    more rows (_PROBE_COUNTS). On CPUs with AMX, bf16 calls of over 32 rows go
    to the tile unit, which sums in another order."""
    probe = torch.randn(_PROBE_ROWS, key[1], generator=torch.Generator().manual_seed(0)).to(key[2])
    with torch.no_grad():
        pairs = torch.cat([_multiply(probe[i : i + 2], packed, None) for i in range(0, _PROBE_ROWS, 2)])
        alone = torch.cat([_multiply(probe[i : i + 1], packed, None) for i in range(8)])
        apart = not torch.equal(alone, pairs[:8])
        most, last = None, 2
        for rows in _PROBE_COUNTS.get(key[2], (8,)):
            if not torch.equal(_multiply(probe[:rows], packed, None), pairs[:rows]):
                most = last
                break
            last = rows
    # bf16 outputs round away most last-bit differences, so a probe cannot clear
    # a shape: over 1024 inputs (where fp32 differs) a lone row goes as two regardless.
    return apart or (key[2] == torch.bfloat16 and key[1] > 1024), most


class PackedWeight:
    """A linear weight in oneDNN's layout: `packed(x, bias)` is `F.linear(x, plain, bias)`.

    Each row's result is the same bits whatever rows are beside it (the lean
    forward's bit-exact verification, docs/design.md): oneDNN multiplies two or
    more rows the same way, but a lone row on another path, which for some
    shapes (inputs over 1024 wide, on AVX-512) sums in another order. For
    those shapes a lone row goes through as two (measured: 5-24% more time
    for that one-row multiply in fp32, 0-9% in bf16). Where calls of many rows
    take yet another path (bf16 on AMX CPUs: over 32 rows), they go in parts
    of at most `most` rows."""

    __slots__ = ("packed", "shape", "dtype", "device", "pad", "most")
    kind = "packed"
    block_types: frozenset[str] = frozenset()
    acts = None

    def __init__(self, plain: torch.Tensor) -> None:
        with torch.no_grad():
            self.packed = _reorder(plain.detach().contiguous())
        self.shape, self.dtype, self.device = plain.shape, plain.dtype, plain.device
        key = (int(plain.shape[0]), int(plain.shape[1]), plain.dtype)
        if key not in _PATHS:
            _PATHS[key] = _paths(self.packed, key)
        self.pad, self.most = _PATHS[key]

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        rows = x.shape[-2]
        if self.most is not None and rows > self.most:
            return torch.cat([self(x[..., i : i + self.most, :], bias) for i in range(0, rows, self.most)], dim=-2)
        if self.pad and rows == 1:
            return _multiply(torch.cat((x, x), dim=-2), self.packed, bias)[..., :1, :]
        return _multiply(x, self.packed, bias)

    def numel(self) -> int:
        return self.shape.numel()

    def plain(self) -> torch.Tensor:
        """The weight in the usual (out, in) layout (a new tensor)."""
        return self.packed.to_dense()


@functools.cache
def packing_works(dtype: torch.dtype) -> bool:
    """Whether weights of `dtype` get packed on this CPU: fp32 everywhere,
    bf16 where oneDNN has native bf16; the ops must exist and agree with
    F.linear on a probe (1 and 5 rows, with and without a bias)."""
    if os.environ.get(DISABLE_ENV, "1") == "0" or dtype not in PROBE_TOLERANCE:
        return False
    if not _ops_present():
        log.warning("packed weights: this torch has no oneDNN packed linear; using F.linear")
        return False
    if dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return False  # emulated bf16: packing would not make it fast; the dtype choice avoids it anyway
    try:
        gen = torch.Generator().manual_seed(0)
        w = torch.randn(48, 80, generator=gen).to(dtype)
        b = torch.randn(48, generator=gen).to(dtype)
        packed = PackedWeight(w)
        for rows in (1, 5):
            x = torch.randn(1, rows, 80, generator=gen).to(dtype)
            for bias in (None, b):
                want = F.linear(x, w, bias).float()
                got = packed(x, bias).float()
                if got.shape != want.shape or (got - want).abs().max() > PROBE_TOLERANCE[dtype] * want.abs().max():
                    raise ValueError("packed result differs from F.linear")
        if not torch.equal(packed.plain(), w):
            raise ValueError("the packed weight does not give the plain one back")
    except (RuntimeError, ValueError) as error:
        log.warning("packed weights: oneDNN's packed linear failed its check (%s); using F.linear",
                    str(error).splitlines()[0] if str(error) else type(error).__name__)
        return False
    return True
