"""The dashboard runs eagle3 only on an engine loaded with a draft head; without one it refuses in one notice."""

from __future__ import annotations

from app_pilot import StartApp
from fake_engine import FakeEngine, open_dashboard, wait_for
from textual.widgets import SelectionList

from racer_core.common.events import EngineInfo
from racer_tui.screens.bench import BenchScreen


async def _dashboard_with_eagle3(pilot) -> BenchScreen:
    bench = await open_dashboard(pilot)
    bench.query_one("#q-begin").value, bench.query_one("#q-end").value = "0", "1"
    bench.query_one("#methods", SelectionList).select("eagle3")
    return bench


async def test_eagle3_without_a_head_is_refused_with_one_notice(start_app: StartApp) -> None:
    engine = FakeEngine()
    pilot = await start_app(engine)
    bench = await _dashboard_with_eagle3(pilot)
    bench.action_start()
    await pilot.pause()
    assert not bench.running and not engine.configs
    notices = [n for n in pilot.app._notifications if n.title == "Cannot start"]
    assert len(notices) == 1 and notices[0].message.startswith("eagle3 needs a draft head")


async def test_eagle3_runs_on_an_engine_with_a_head(start_app: StartApp) -> None:
    engine = FakeEngine(info=EngineInfo("fake-model", "cpu", "float32", draft_head="head"))
    pilot = await start_app(engine)
    bench = await _dashboard_with_eagle3(pilot)
    bench.action_start()
    await wait_for(pilot, lambda: bench.result is not None)
    assert "eagle3" in {c.method for c in engine.configs}
