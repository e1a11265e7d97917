"""The live monitor of `racer-tui api`, driven by Pilot over the scripted
engine: the address, the request on the engine with its accepted tokens
coloured as in the chat, the finished requests and the totals."""

from __future__ import annotations

import asyncio

import pytest
from api_helpers import client, http
from fake_engine import FakeEngine, tokenize, wait_for

from racer_tui.api.monitor import ApiMonitor
from racer_tui.api.server import ServerSettings
from racer_tui.api.service import ApiService
from racer_tui.colors import LOGITS_GREEN, RETRIEVAL_GREEN


def text_of(app: ApiMonitor, selector: str) -> str:
    return str(app.query_one(selector).render())


def ask(service: ApiService) -> str:
    return client(service).chat.completions.create(
        model="fake", messages=[{"role": "user", "content": "hi"}]).choices[0].message.content


async def until_held(pilot, app: ApiMonitor, engine: FakeEngine) -> None:  # noqa: ANN001
    """Until the engine holds at its gate with the request a few steps in."""
    await wait_for(pilot, lambda: engine.paused.is_set() and app.running is not None
                   and app.running.tally.stats.steps >= 4)


@pytest.mark.asyncio
async def test_the_monitor_shows_the_running_request_and_the_finished_ones() -> None:
    engine = FakeEngine(gate_after=6)
    service = ApiService(engine, ServerSettings(), "127.0.0.1", 0)
    app = ApiMonitor(service)
    async with app.run_test(size=(140, 36)) as pilot:
        assert service.url in text_of(app, "#address") and "fake-model" in text_of(app, "#address")
        assert "no key" in text_of(app, "#address") and "no requests yet" in text_of(app, "#totals")

        reply = asyncio.create_task(asyncio.to_thread(ask, service))
        await until_held(pilot, app, engine)
        await pilot.pause(0.1)
        live = text_of(app, "#live-stats")
        assert app.running.id in live and "chat racer" in live and "tok/s" in live and "MAT" in live
        styles = {str(span.style) for span in app._live.spans}
        assert {RETRIEVAL_GREEN, LOGITS_GREEN} <= styles  # accepted drafts coloured by source, as in the chat
        assert "busy" in text_of(app, "#queue")
        engine.release()
        assert await asyncio.wait_for(reply, 30) == engine.reply
        await wait_for(pilot, lambda: app.requests == 1)
        await pilot.pause(0.05)
        table = app.query_one("#requests")
        row = table.get_row_at(0)
        assert row[4] == "done" and row[5] == str(len(tokenize(engine.reply)))
        assert "1 requests (1 done)" in text_of(app, "#totals") and "MAT" in text_of(app, "#totals")
        assert "idle" in text_of(app, "#queue") and "waiting for requests" in text_of(app, "#live-stats")

        refused = await asyncio.to_thread(http, service, "/v1/chat/completions", "{oops")
        assert refused.status == 400
        await wait_for(pilot, lambda: app.refusals == 1)
        await pilot.pause(0.05)
        assert "refused: 1" in text_of(app, "#queue") and "not valid JSON" in text_of(app, "#queue")
        await pilot.press("ctrl+q")
    assert not service.worker.alive  # quitting stopped the server and its engine threads


@pytest.mark.asyncio
async def test_a_step_is_drawn_at_the_pace_and_the_end_at_once() -> None:
    """A step changes the running line only, drawn at a pace (racer_tui/redraw_pace.py);
    a request's start and end are drawn at once."""
    engine = FakeEngine(gate_after=6)
    service = ApiService(engine, ServerSettings(), "127.0.0.1", 0)
    app = ApiMonitor(service)
    async with app.run_test(size=(140, 36)) as pilot:
        pace = app.step_redraws
        pace.fastest = pace.slowest = pace.every = 3600.0  # after the first step's redraw, none for the test's run

        reply = asyncio.create_task(asyncio.to_thread(ask, service))
        await until_held(pilot, app, engine)
        await pilot.pause(0.1)
        kept, shown = app._live.plain, text_of(app, "#live-text")
        assert len(shown) < len(kept) and kept.startswith(shown)  # the steps are kept, not all drawn
        assert pace.due
        engine.release()
        assert await asyncio.wait_for(reply, 30) == engine.reply
        await wait_for(pilot, lambda: app.requests == 1)
        await pilot.pause(0.05)
        assert not pace.due
        assert "idle" in text_of(app, "#queue") and "waiting for requests" in text_of(app, "#live-stats")
        await pilot.press("ctrl+q")
