"""Issue 41 (6): a benchmark stopped early, before or during its first step,
said "stopping after this step…" for ever. When the run ends the dashboard
says it stopped, and it can start again."""

from __future__ import annotations

import pytest
from app_pilot import SMALL, StartApp
from fake_engine import FakeEngine, open_dashboard, wait_for

from racer_core.bench.runner import WARMUP_TOKENS
from racer_tui.screens.bench import BenchScreen, RunClaim
from racer_tui.widgets.bench_tables import progress_table


def info(bench: BenchScreen) -> str:
    return str(bench.query_one("#bench-info").render())


async def stopped_then_started_again(pilot, bench: BenchScreen, engine: FakeEngine) -> None:
    """The stopped run's status, then a short run on the same board to the end."""
    await wait_for(pilot, lambda: not bench.running)
    assert "stopped" in info(bench) and "stopping" not in info(bench)
    assert "0/42" in str(progress_table(bench.board).columns[2]._cells)
    assert not bench.query_one("#start").disabled and bench.query_one("#stop").disabled
    assert pilot.app.engine_user is None
    engine.release()
    bench.query_one("#q-end").value = "2"
    await pilot.press("ctrl+g")
    await wait_for(pilot, lambda: bench.result is not None and bench.result.completed)
    assert "stopped" not in info(bench)


async def held_run(start_app: StartApp, gate_after: int = 0):
    """The dashboard's run of the 42 questions, started and held by the engine at its gate."""
    engine = FakeEngine(gate_after=gate_after)
    pilot = await start_app(engine, size=SMALL)
    bench = await open_dashboard(pilot)
    await pilot.press("ctrl+g")
    await wait_for(pilot, engine.paused.is_set)
    return pilot, bench, engine


@pytest.mark.parametrize("gate_after", [0, 2 * WARMUP_TOKENS], ids=["in the warm-up", "in the first question"])
async def test_escape_before_or_in_the_first_step_says_stopped(start_app: StartApp, gate_after: int) -> None:
    pilot, bench, engine = await held_run(start_app, gate_after)  # ar's and racer's warm-ups take 16 and fewer steps
    assert bench.running and "stopping" not in info(bench)
    await pilot.press("escape")  # "stopping after this step…" until the thread ends
    await stopped_then_started_again(pilot, bench, engine)


async def test_a_cancelled_worker_ends_the_run_once_its_thread_has(start_app: StartApp) -> None:
    pilot, bench, engine = await held_run(start_app)
    worker = next(w for w in bench.workers if w.group == "bench")
    worker.cancel()  # its thread is in a step: the engine stays claimed until the thread ends
    await stopped_then_started_again(pilot, bench, engine)


async def test_escape_closes_the_floating_setup_before_it_stops_the_run(start_app: StartApp) -> None:
    pilot, bench, engine = await held_run(start_app)
    await pilot.press("ctrl+b")
    assert bench.has_class("-controls-floating")
    await pilot.press("escape")
    assert not bench.has_class("-controls-floating") and bench.running and "stopping" not in info(bench)
    await pilot.press("escape")
    await stopped_then_started_again(pilot, bench, engine)


def test_a_run_given_up_before_its_thread_began_never_begins() -> None:
    claim = RunClaim()
    assert claim.give_up(1)  # cancelled before the thread began: the screen ends the run
    assert not claim.begin(1)  # the thread, should it start late, does nothing
    assert claim.begin(2)  # a thread that began first
    assert not claim.give_up(2)  # ends the run itself (its BenchDone)
