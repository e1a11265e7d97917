"""A test run leaves no temporary folders behind (the embedded model's cache
used to stay in the temp directory after every run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_test_run_removes_its_temporary_folders(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = dict(os.environ, TMPDIR=str(temp))
    env.pop("RACER_TUI_CACHE_DIR", None)  # the default: a cache inside the run's own folder
    env.pop("RACER_TUI_DATA_DIR", None)
    env.pop("RACER_TUI_CONFIG_DIR", None)
    test = ROOT / "tests" / "bench" / "test_bench_results.py"  # its tests use tmp_path
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    left = [p.name for p in temp.iterdir() if p.name.startswith("racer-tests-")]
    assert left == []
    # pytest's own per-test folders of passing tests are not kept either
    assert list(temp.glob("pytest-of-*/pytest-*/test_*")) == []
