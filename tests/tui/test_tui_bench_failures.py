"""The dashboard when the engine fails on one question: the run goes on, the
progress and the table count the failure, and a notice says so once."""

from __future__ import annotations

from app_pilot import StartApp
from fake_engine import FakeEngine, open_dashboard, wait_for

from racer_tui.widgets.bench_tables import progress_table


async def test_a_failed_question_is_counted_and_the_run_goes_on(start_app: StartApp) -> None:
    engine = FakeEngine()

    def boom(method: str) -> None:  # racer's third send: warm-up, question 1, then question 2
        if engine.calls[-1][0] == "racer" and sum(m == "racer" for m, _ in engine.calls) == 3:
            raise RuntimeError("CUDA out of memory")

    engine.step_hook = boom
    pilot = await start_app(engine)
    bench = await open_dashboard(pilot)
    bench.query_one("#q-end").value = "3"
    bench.action_start()
    await wait_for(pilot, lambda: bench.result is not None)
    result = bench.result
    assert result.completed and result.failed("racer") == 1 and result.failed("ar") == 0
    assert len(result.records["racer"]) == 2 and len(result.records["ar"]) == 3  # question 3 was answered
    assert bench.board.failed == {"racer": 1} and bench.board.finished("racer") == 3
    rows = str(progress_table(bench.board).columns[2]._cells)
    assert "3/3 (1 failed)" in rows
    await wait_for(pilot, lambda: any("1 question failed" in n.message for n in pilot.app._notifications))
    assert "racer: 1 question failed" in str(result.warnings())
