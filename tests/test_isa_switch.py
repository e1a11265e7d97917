"""RACER_TEST_ISA=avx2 (tests/conftest.py): the suite runs with torch's
libraries limited to the AVX2 class, set before torch loads, so a machine
with AVX-512 catches what fails on an AVX2-only CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from racer_core.budget import cpu_class

ROOT = Path(__file__).resolve().parents[1]


def test_under_the_switch_torch_runs_the_avx2_class(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in cpu_class.ISA_ENV["avx2"]}
    env["RACER_TEST_ISA"] = "avx2"
    done = subprocess.run([sys.executable, "-m", "pytest", f"{__file__}::test_the_limits_hold_in_this_process",
                           "-p", "no:randomly", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "t")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "CPU class AVX2 (limited: ATEN_CPU_CAPABILITY=avx2" in done.stdout  # the report header
    assert "1 passed" in done.stdout


def test_the_limits_hold_in_this_process() -> None:
    if os.environ.get("RACER_TEST_ISA") != "avx2":
        pytest.skip("run by the test above, under RACER_TEST_ISA=avx2")
    import torch

    assert cpu_class.isa_active("avx2")
    assert torch.backends.cpu.get_cpu_capability() == "AVX2"


def test_a_bad_value_is_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "RACER_TEST_ISA": "avx3"}
    done = subprocess.run([sys.executable, "-m", "pytest", str(Path(__file__)), "-q", "-p", "no:cacheprovider",
                           "--basetemp", str(tmp_path / "t")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode != 0
    assert done.stderr.strip() == "ERROR: RACER_TEST_ISA: unknown CPU class 'avx3': one of native, avx2, avxvnni"


def test_limits_are_refused_once_torch_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch  # noqa: F401  (loaded, as in any test process)

    for name in cpu_class.ISA_ENV["avx2"]:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError, match="torch is already loaded"):
        cpu_class.limit_here("avx2")
