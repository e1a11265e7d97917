"""Screens fed by an engine's steps redraw at a pace, not at every step
(racer_tui/redraw_pace.py): a redraw lays the screen out, and drawn at every
step of a fast model it took the model's own CPU. The chat is not even told
of each step (racer_tui/chat/step_inbox.py). Every step is kept, and the end
is drawn whole."""

from __future__ import annotations

import threading

import pytest
from app_pilot import StartApp
from fake_engine import REPLY, FakeEngine, drain, failed_reply, open_dashboard, ready_chat, wait_for
from textual.message import Message

from racer_tui import redraw_pace
from racer_tui.messages import ReplySteps
from racer_tui.redraw_pace import RedrawPace
from racer_tui.screens.chat import ChatScreen
from racer_tui.widgets.bench_charts import FlightChart
from racer_tui.widgets.status_line import StatusLine
from racer_tui.widgets.step_chart import StepChart
from racer_tui.widgets.turns import ReplyTurn

HOUR = 3600.0


def _shown(turn: ReplyTurn) -> str:
    return str(turn.query_one(".reply-text").render())


def _told(chat: ChatScreen) -> list[ReplySteps]:
    """The ReplySteps the engine's thread posts to `chat` from now on."""
    told: list[ReplySteps] = []
    post = chat.post_message

    def counted(message: Message) -> bool:
        if isinstance(message, ReplySteps):
            told.append(message)
        return post(message)

    chat.post_message = counted  # type: ignore[method-assign]
    return told


def _hold(pace: RedrawPace) -> None:
    """After the next redraw, none for an hour (a test's whole run)."""
    pace.fastest = pace.slowest = pace.every = HOUR


async def test_steps_between_redraws_wait_untold_and_the_end_shows_them_all(start_app: StartApp) -> None:
    """After a redraw the engine's thread tells the screen of one step; the
    steps after it wait in the inbox, no message and no widget work each,
    until the pace's redraw or the reply's end takes them all at once."""
    engine = FakeEngine(gate_after=6)
    held, go = threading.Event(), threading.Event()

    def hold_mid_reply(_method: str) -> None:
        if engine.total_steps == 12:  # twelve steps made, six since the gate
            held.set()
            go.wait(20)

    engine.step_hook = hold_mid_reply
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    _hold(chat.redraws)
    await pilot.press(*"hello", "enter")
    await wait_for(pilot, engine.paused.is_set)
    await drain(pilot, chat)
    turn = chat.query_one(ReplyTurn)
    shown = _shown(turn)
    assert shown and not chat.redraws.due  # the steps before the gate: drawn, the next one awaited
    told = _told(chat)
    engine.release()
    await wait_for(pilot, held.is_set)
    await drain(pilot, chat)
    assert len(told) == 1  # six steps since the redraw, one message: the first of them
    assert _shown(turn) == shown and chat.redraws.due  # not drawn: the redraw waits for the pace
    assert len(chat.steps.steps(turn.reply_id)) + len(chat._inbox) == 12  # every step kept, taken or waiting
    go.set()
    await wait_for(pilot, lambda: not chat.generating)
    await drain(pilot, chat)
    assert len(told) == 2  # ...and the last step's
    assert turn.content == REPLY and _shown(turn) == REPLY
    assert len(chat.query_one(StepChart).lengths) == chat.stats.steps  # every step's bar, once


async def test_a_failed_reply_leaves_no_redraw_behind(start_app: StartApp) -> None:
    _, chat = await failed_reply(start_app)
    assert not chat.redraws.due and not chat._unshown_bars and not chat._inbox.take()
    assert not chat.query(ReplyTurn)


async def test_the_benchmarks_flight_chart_waits_too_and_ends_whole(start_app: StartApp) -> None:
    engine = FakeEngine(gate_after=75)  # the warm-ups make 45 + 20 steps: ten steps into the first question
    pilot = await start_app(engine)
    bench = await open_dashboard(pilot)
    bench.query_one("#q-begin").value = "1"
    bench.query_one("#q-end").value = "2"
    _hold(bench.flight_redraws)
    bench.action_start()
    await wait_for(pilot, engine.paused.is_set)
    await drain(pilot, bench)
    steps = bench.board.flight.accept_lengths
    assert len(steps) >= 2  # the question has made steps...
    assert len(bench.query_one(FlightChart).lengths) < len(steps)  # ...not all drawn yet
    assert bench.flight_redraws.due
    engine.release()
    await wait_for(pilot, lambda: bench.result is not None)
    await pilot.pause()
    assert not bench.flight_redraws.due
    last = list(bench.board.flight.accept_lengths)
    assert last and bench.query_one(FlightChart).lengths == last  # the last question, whole


class _Clock:
    """time.monotonic and time.thread_time as a test sets them."""

    def __init__(self) -> None:
        self.wall = 100.0
        self.cpu = 5.0

    def monotonic(self) -> float:
        return self.wall

    def thread_time(self) -> float:
        return self.cpu


class _Timer:
    def __init__(self, seconds: float, callback) -> None:  # noqa: ANN001
        self.seconds, self.callback, self.stopped = seconds, callback, False

    def stop(self) -> None:
        self.stopped = True


def test_a_request_draws_now_or_once_the_pace_allows(monkeypatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(redraw_pace, "time", clock)
    drawn: list[float] = []
    timers: list[_Timer] = []
    pace = RedrawPace(lambda: drawn.append(clock.wall), lambda s, cb: timers.append(_Timer(s, cb)) or timers[-1])
    pace.request()
    assert drawn == [100.0] and not timers  # the first: at once
    clock.wall += 0.03
    pace.request()
    pace.request()  # one redraw is due already: no second timer
    assert drawn == [100.0] and len(timers) == 1 and timers[0].seconds == pytest.approx(pace.fastest - 0.03)
    clock.wall += timers[0].seconds
    timers[0].callback()
    assert drawn == [100.0, clock.wall] and not pace.due
    pace.request()
    assert len(timers) == 2 and pace.due
    pace.draw_now()  # the end: at once, the waiting redraw dropped
    assert len(drawn) == 3 and timers[1].stopped and not pace.due


def test_the_pace_slows_while_drawing_is_costly_and_recovers(monkeypatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(redraw_pace, "time", clock)
    pace = RedrawPace(lambda: None, lambda s, cb: _Timer(s, cb))
    pace.draw_now()  # the first redraw: nothing to judge yet
    assert pace.every == pace.fastest

    def redraw_after(seconds: float, busy_share: float) -> float:
        clock.wall += seconds
        clock.cpu += seconds * busy_share
        pace.draw_now()
        return pace.every

    costly = 3 * pace.share
    assert redraw_after(0.1, costly) == 2 * pace.fastest  # doubles...
    paces = [redraw_after(pace.every, costly) for _ in range(10)]
    assert paces[-1] == pace.slowest and max(paces) == pace.slowest  # ...up to the slowest
    assert redraw_after(pace.slowest, pace.share * 0.9) == pace.slowest  # in between: kept
    assert redraw_after(pace.slowest, 0.0) == pace.slowest / 2  # cheap again: halves...
    paces = [redraw_after(pace.every, 0.0) for _ in range(10)]
    assert paces[-1] == pace.fastest and min(paces) == pace.fastest  # ...down to the fastest


def test_the_first_redraw_is_at_once_even_with_the_clock_below_the_pace(monkeypatch) -> None:
    clock = _Clock()  # time.monotonic counts from boot: 100 s here, less than the pace below
    monkeypatch.setattr(redraw_pace, "time", clock)
    drawn: list[float] = []
    pace = RedrawPace(lambda: drawn.append(clock.wall), lambda s, cb: _Timer(s, cb))
    _hold(pace)
    pace.request()
    assert drawn == [100.0] and not pace.due


async def test_the_status_line_changes_without_laying_the_screen_out(start_app: StartApp) -> None:
    """It is one line (height 1) and changes at every redraw of a reply: a new
    status needs no layout of the whole screen."""
    pilot = await start_app()
    chat = await ready_chat(pilot)
    status = chat.query_one(StatusLine)
    layouts: list[bool] = []
    refresh = status.refresh

    def spied(*regions, layout: bool = False, **kwargs) -> StatusLine:  # noqa: ANN002, ANN003
        layouts.append(layout)
        return refresh(*regions, layout=layout, **kwargs)

    status.refresh = spied  # type: ignore[method-assign]
    chat.show_status()
    assert layouts and not any(layouts)
