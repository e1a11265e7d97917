"""Test-wide isolation: user data, settings and caches go to a temporary
directory, never the real home, and that directory is removed when the test
process ends. RACER_TUI_CACHE_DIR may be set by the caller to reuse a
dequantized embedded model between runs (that folder is left alone); the
installed embedded model itself is read from its real folder.

Property tests: in CI (CI=true, as .ci/run and CI services set it) hypothesis
runs derandomized, the same examples every run and no example database, so a
failure there reproduces; locally its default profile explores anew each run.

RACER_TEST_ISA=avx2 runs the suite with torch's libraries limited to the AVX2
class (racer_core/budget/cpu_class.py, as `--isa avx2` does for measuring), so a
machine with AVX-512 catches what fails on most users' CPUs. The limits are set
here, before anything imports torch: its libraries read them once, when they load."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from racer_core.budget import cpu_class

TEST_ISA_ENV = "RACER_TEST_ISA"
_isa_error: str | None = None
if os.environ.get(TEST_ISA_ENV):
    try:
        cpu_class.limit_here(os.environ[TEST_ISA_ENV])
    except (ValueError, RuntimeError) as error:
        _isa_error = f"{TEST_ISA_ENV}: {error}"  # said in one line by pytest_configure

from hypothesis import settings  # noqa: E402
from scripted_curve import scripted_on, still_clock  # noqa: E402

from racer_core.budget import cost_curve  # noqa: E402
from racer_core.common.paths import models_dir  # noqa: E402
from racer_core.drafting import racer as racer_drafter  # noqa: E402

# Recent hypothesis loads a "ci" profile of its own wherever CI is set (even CI=false); this one
# holds on every version the project allows, and only where CI is true.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes") else "default")

_root = tempfile.mkdtemp(prefix="racer-tests-")
atexit.register(shutil.rmtree, _root, ignore_errors=True)  # also after a failed or interrupted run
# The embedded model as `racer-tui install-model` put it (the README's test command runs it first),
# read where it is before the data folder moves to the run's own; only the install tests write there,
# and they point RACER_TUI_MODELS_DIR at a temporary folder.
os.environ.setdefault("RACER_TUI_MODELS_DIR", str(models_dir()))
os.environ["RACER_TUI_DATA_DIR"] = os.path.join(_root, "data")
os.environ["RACER_TUI_CONFIG_DIR"] = os.path.join(_root, "config")
os.environ.setdefault("RACER_TUI_CACHE_DIR", os.path.join(_root, "cache"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Importing transformers' model code makes torch's inductor cache folder in the
# temp directory (empty, never removed): keep it inside the run's own folder.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_root, "torchinductor"))

# The original's unittest command for the paper-alignment cases; pytest runs them from tests/core/.
collect_ignore = ["test_automaton_paper_alignment.py"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "measures_cost_curve: runs the real cost-curve measurement (on a fake clock)")
    if _isa_error:
        raise pytest.UsageError(_isa_error)


def pytest_report_header() -> str | None:
    """Under RACER_TEST_ISA, the class torch actually runs with (it must say limited)."""
    return f"CPU class {cpu_class.describe()}" if os.environ.get(TEST_ISA_ENV) else None


@pytest.fixture(autouse=True)
def scripted_cost_curve(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test times anything: every engine gets scripted_curve.SCRIPTED_CURVE instead of
    measuring its forward on this machine, so `auto` drafts alike everywhere.
    A test of the measuring code marks itself `measures_cost_curve` and must
    bring a fake clock: the measurement fails the test if it ran on the real one."""
    real = cost_curve.load_or_measure
    monkeypatch.setattr(racer_drafter, "drafting_clock", still_clock)
    if request.node.get_closest_marker("measures_cost_curve") is None:
        monkeypatch.setattr(cost_curve, "load_or_measure", lambda key, grid, measure, *a, **k: scripted_on(grid))
        return

    def fake_clocks_only(key, grid, measure, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
        def measured(sizes):  # noqa: ANN001, ANN202
            import time

            engine = sys.modules.get("racer_core.engine.engine")
            if engine is not None and engine.time.perf_counter is time.perf_counter:
                pytest.fail("a test engine measured a real cost curve (on the real clock): script it or fake the clock")
            return measure(sizes)

        return real(key, grid, measured, *args, **kwargs)

    monkeypatch.setattr(cost_curve, "load_or_measure", fake_clocks_only)


@pytest.fixture
def float32_kv_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fused layers' cache in float32, for tests that hold a GGUF's block
    arithmetic to a float32 forward within 1e-4 of the largest logit: the
    default float16 cache's rounding (tests/core/test_quant_layer.py) is
    larger than that."""
    monkeypatch.setenv("RACER_KV_CACHE", "float32")


@pytest.fixture
def tui_user_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Per-test data, config and cache folders for app tests (history and
    settings must not leak between them)."""
    monkeypatch.setenv("RACER_TUI_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("RACER_TUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path / "cache"))
