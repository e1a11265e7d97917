"""Scripts in scripts/ run end to end at their smallest settings, so a broken script fails CI.

Each script runs in-process through its main(argv) on the tiny random-weight model; the test
checks only that it finishes and prints its result line, never how fast.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def _main(name: str):
    return runpy.run_path(str(SCRIPTS / name), run_name="smoke")["main"]


def test_record_cost_runs_on_the_tiny_model(capsys: pytest.CaptureFixture[str]) -> None:
    _main("record_cost.py")(["--tiny", "--max-new-tokens", "8"])
    out = capsys.readouterr().out
    assert "tiny-llama" in out and "% of a step" in out


def test_linear_cost_prints_its_table(capsys: pytest.CaptureFixture[str]) -> None:
    _main("linear_cost.py")(["--sizes", "1", "--rounds", "1", "--dtype", "float32"])
    out = capsys.readouterr().out
    assert "decoder linears" in out and "lm_head share" in out


def test_first_start_finds_the_installed_embedded_model(tmp_path, monkeypatch) -> None:
    """Its children get fresh data folders; the embedded model is still found where it is installed."""
    from racer_core.models.embedded import EMBEDDED_FILE, embedded_gguf

    installed = tmp_path / "user-data" / "models" / EMBEDDED_FILE
    installed.parent.mkdir(parents=True)
    installed.write_bytes(b"GGUF")
    monkeypatch.delenv("RACER_TUI_MODELS_DIR", raising=False)
    monkeypatch.setenv("RACER_TUI_DATA_DIR", str(tmp_path / "user-data"))
    env = runpy.run_path(str(SCRIPTS / "first_start.py"), run_name="smoke")["child_environment"](tmp_path / "run")
    monkeypatch.setattr("os.environ", env)
    assert env["RACER_TUI_DATA_DIR"] == str(tmp_path / "run" / "data") and embedded_gguf() == installed
