"""The dashboard's repeats field, driven like a user would on the scripted engine.

A run with repeats answers each question N times interleaved and keeps the
try of median time, as `racer-tui bench --repeats N` does; its table and
warnings are the headless ones; bad input is refused with one notice.
"""

from __future__ import annotations

import io

import pytest
from app_pilot import StartApp
from fake_engine import STEP_TIMES, FakeClock, FakeEngine, drain, open_dashboard, wait_for
from rich.console import Console

from racer_core.bench import runner
from racer_core.bench.report import bench_tables
from racer_core.common.events import EngineInfo
from racer_tui.screens.bench import BenchScreen
from racer_tui.widgets.bench_charts import FlightChart

STEP = sum(STEP_TIMES)
# racer's three tries of a question take 1, 5 and 2 steps' time per step (ar always 1): the 2 one is kept
SLOWER = (0.0, 4 * STEP, STEP)


async def dashboard(pilot, begin: str, end: str, repeats: str) -> BenchScreen:
    bench = await open_dashboard(pilot)
    bench.query_one("#q-begin").value = begin
    bench.query_one("#q-end").value = end
    bench.query_one("#repeats").value = repeats
    return bench


def shown(bench: BenchScreen) -> str:
    """The results panel as text, at its width on screen."""
    table = bench.query_one("#bench-table")
    out = io.StringIO()
    Console(file=out, width=table.size.width, color_system=None).print(table.content)
    return out.getvalue()


def racer_try(engine: FakeEngine) -> int:
    """The 0-based try of racer's reply in flight (one warm-up send first, single-turn questions)."""
    return (sum(1 for c in engine.configs if c.method == "racer") - 2) % 3


async def test_repeats_keep_the_median_try_and_show_the_spread_and_the_warning(
    start_app: StartApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(runner, "_clock", clock.perf_counter)

    def slow_racer(method: str) -> None:
        if method == "racer":
            clock.advance(SLOWER[racer_try(engine)])

    # hold inside a later try of the first question: the progress must say which one
    engine = FakeEngine(clock=clock, step_hook=slow_racer, gate_after=120)
    pilot = await start_app(engine)
    bench = await dashboard(pilot, "1", "3", "3")  # questions 2 and 3: one turn each
    bench.action_start()
    await wait_for(pilot, engine.paused.is_set)
    await drain(pilot, bench)
    method = engine.configs[-1].method
    sends = sum(1 for c in engine.configs[2:] if c.method == method)  # after the two warm-ups
    expected = f"in flight: {method} · question {(sends - 1) // 3 + 1}/2, try {(sends - 1) % 3 + 1}/3"
    assert bench.query_one(FlightChart).title == expected
    assert sends > 1  # not the first try: a try count that never moved would prove nothing
    assert "3 tries each, the median kept" in str(bench.query_one("#bench-info").render())
    engine.release()
    await wait_for(pilot, lambda: bench.result is not None)

    result = bench.result
    assert result.completed and result.repeats == 3
    asked = [(c.method, text) for c, (text, _) in zip(engine.configs, engine.prompts, strict=True)][2:]
    assert [m for m, _ in asked] == ["ar", "racer"] * 6  # every method once per round
    assert [t for _, t in asked][:6] == [asked[0][1]] * 6  # three rounds of question 2 before question 3
    for key, record in result.records["racer"].items():
        events = len(record.accept_lengths) + 1  # the prefill is timed too
        assert record.seconds == pytest.approx(events * (STEP + SLOWER[2]))  # the median try
        assert len(result.repeat_speeds["racer"][key]) == 3
    assert bench.board.per_method["racer"].replies == 2  # the kept answers only

    text = shown(bench)
    spread = result.totals("racer").versus.spread_text
    assert "per" in text and "question" in text and spread != "–" and spread in text
    warning = next(w for w in result.warnings() if "between tries" in w)
    assert "changed 5.00x between tries" in warning
    assert "WARNING" in text and "between tries" in text
    # the one renderer: the panel is the headless summary's all-questions table
    shown_tables = bench.query_one("#bench-table").content.renderables  # per category, then all questions
    assert shown_tables[-1].caption.plain == bench_tables(result)[-1].caption.plain


@pytest.mark.parametrize("bad", ["0", "-2", "", "two"])
async def test_bad_repeats_are_refused_with_one_notice(start_app: StartApp, bad: str) -> None:
    engine = FakeEngine()
    pilot = await start_app(engine)
    app = pilot.app
    bench = await dashboard(pilot, "0", "1", bad)
    bench.action_start()
    await pilot.pause()
    assert not bench.running and app.engine_user is None and not engine.configs
    notices = [n for n in app._notifications if n.title == "Cannot start"]
    assert len(notices) == 1 and notices[0].message.startswith("repeats must be")
    bench.query_one("#repeats").value = "2"  # corrected, the run starts
    bench.action_start()
    await wait_for(pilot, lambda: bench.result is not None)
    assert bench.result.repeats == 2 and len(engine.configs) == 2 + 2 * 2 * 2  # warm-ups, 2 tries x 2 turns


async def test_the_run_names_the_cpu_and_class_its_figures_are_for(start_app: StartApp) -> None:
    engine = FakeEngine(info=EngineInfo("fake-model", "cpu", "float32",
                                        cpu="AMD EPYC (family 25, model 17), AVX2 (limited)"))
    pilot = await start_app(engine)
    bench = await dashboard(pilot, "1", "2", "1")
    bench.action_start()
    await wait_for(pilot, lambda: bench.result is not None)
    info = str(bench.query_one("#bench-info").render()).replace("\n", " ")
    assert "on fake-model (AMD EPYC (family 25, model 17), AVX2 (limited))" in info
