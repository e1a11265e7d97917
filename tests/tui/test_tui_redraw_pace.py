"""A streaming reply is redrawn at a pace, not at every step: a redraw lays
the whole screen out, and drawn at every step of a fast model it took the
model's own CPU (racer_tui/screens/chat.py, REDRAW_S). Every step is still
kept as it comes, and the finished reply is drawn whole."""

from __future__ import annotations

from app_pilot import StartApp
from fake_engine import REPLY, FakeEngine, ready_chat, tokenize, wait_for

from racer_tui.screens import chat as chat_module
from racer_tui.screens.chat import ChatScreen
from racer_tui.widgets.step_chart import StepChart
from racer_tui.widgets.turns import ReplyTurn


def _shown(turn: ReplyTurn) -> str:
    return str(turn.query_one(".reply-text").render())


async def test_steps_between_redraws_wait_and_the_end_shows_them_all(start_app: StartApp) -> None:
    engine = FakeEngine(gate_after=6)
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    chat.REDRAW_S = (3600.0, 3600.0)  # after the first redraw, none until the reply ends
    chat._redraw_s = 3600.0
    await pilot.press(*"hello", "enter")
    await wait_for(pilot, engine.paused.is_set)
    await pilot.pause()
    turn = chat.query_one(ReplyTurn)
    kept, shown = turn.content, _shown(turn)
    assert len(tokenize(kept)) >= 6  # every step so far is kept...
    assert len(shown) < len(kept) and kept.startswith(shown)  # ...but not drawn yet
    assert len(chat.query_one(StepChart).lengths) < chat.stats.steps
    engine.release()
    await wait_for(pilot, lambda: not chat.generating)
    await pilot.pause()
    assert turn.content == REPLY
    assert len(chat.query_one(StepChart).lengths) == chat.stats.steps  # every step's bar, once


async def test_a_failed_reply_leaves_no_redraw_behind(start_app: StartApp) -> None:
    engine = FakeEngine(fail_with=RuntimeError("boom"))
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    await pilot.press(*"hello", "enter")
    await wait_for(pilot, lambda: not chat.generating)
    await pilot.pause()
    assert chat._redraw is None and not chat._unshown_bars
    assert not chat.query(ReplyTurn)


class _Clock:
    """time.monotonic and time.thread_time as a test sets them."""

    def __init__(self) -> None:
        self.wall = 100.0
        self.cpu = 5.0

    def monotonic(self) -> float:
        return self.wall

    def thread_time(self) -> float:
        return self.cpu


def test_the_pace_slows_while_drawing_is_costly_and_recovers(monkeypatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(chat_module, "time", clock)
    screen = ChatScreen()
    fastest, slowest = screen.REDRAW_S
    screen._pace_redraws()  # the first redraw: nothing to judge yet
    assert screen._redraw_s == fastest

    def redraw_after(seconds: float, busy_share: float) -> float:
        clock.wall += seconds
        clock.cpu += seconds * busy_share
        screen._pace_redraws()
        return screen._redraw_s

    costly = 3 * screen.REDRAW_SHARE
    assert redraw_after(0.1, costly) == 2 * fastest  # doubles...
    paces = [redraw_after(screen._redraw_s, costly) for _ in range(10)]
    assert paces[-1] == slowest and max(paces) == slowest  # ...up to the slowest
    assert redraw_after(slowest, screen.REDRAW_SHARE * 0.9) == slowest  # in between: kept
    assert redraw_after(slowest, 0.0) == slowest / 2  # cheap again: halves...
    paces = [redraw_after(screen._redraw_s, 0.0) for _ in range(10)]
    assert paces[-1] == fastest and min(paces) == fastest  # ...down to the fastest
