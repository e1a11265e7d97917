"""Test-wide isolation: user data, settings and caches go to a temporary
directory, never the real home, and that directory is removed when the test
process ends. RACER_TUI_CACHE_DIR may be set by the caller to reuse a
dequantized embedded model between runs (that folder is left alone).

Property tests: in CI (CI=true, as .ci/run and CI services set it) hypothesis
runs derandomized, the same examples every run and no example database, so a
failure there reproduces; locally its default profile explores anew each run."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

# Recent hypothesis loads a "ci" profile of its own wherever CI is set (even CI=false); this one
# holds on every version the project allows, and only where CI is true.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes") else "default")

_root = tempfile.mkdtemp(prefix="racer-tests-")
atexit.register(shutil.rmtree, _root, ignore_errors=True)  # also after a failed or interrupted run
os.environ["RACER_TUI_DATA_DIR"] = os.path.join(_root, "data")
os.environ["RACER_TUI_CONFIG_DIR"] = os.path.join(_root, "config")
os.environ.setdefault("RACER_TUI_CACHE_DIR", os.path.join(_root, "cache"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Importing transformers' model code makes torch's inductor cache folder in the
# temp directory (empty, never removed): keep it inside the run's own folder.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_root, "torchinductor"))

# The original's unittest command for the paper-alignment cases; pytest runs them from tests/core/.
collect_ignore = ["test_automaton_paper_alignment.py"]


@pytest.fixture
def tui_user_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Per-test data, config and cache folders for app tests (history and
    settings must not leak between them)."""
    monkeypatch.setenv("RACER_TUI_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("RACER_TUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path / "cache"))
