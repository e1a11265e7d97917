"""SVG snapshots of every screen on the scripted engine.

Deterministic by construction: fixed terminal size, no animations, no cursor
blink (headless), fixed step timings (tokens/s), the benchmark runner's clock
driven by the fake engine, and explicit chart colours. Update with
`pytest tests/tui/test_tui_snapshots.py --snapshot-update` and review the SVGs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from app_pilot import SIZE, SMALL
from fake_engine import FakeClock, FakeEngine, drain, failing_factory, make_app, ready_chat, wait_for

from racer_core.bench import runner
from racer_tui.screens.bench import BenchScreen
from racer_tui.screens.chat import ChatScreen
from racer_tui.screens.model_error import ModelErrorScreen
from racer_tui.widgets import chat_list


@pytest.fixture(autouse=True)
def _home_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Paths on screen are shown from ~ (the home folder): the same in every run."""
    monkeypatch.setenv("HOME", str(tmp_path))


@pytest.fixture(autouse=True)
def _fixed_chat_dates(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sidebar's dates are the same in every run."""
    monkeypatch.setattr(chat_list, "chat_date", lambda updated, now=None: "today 12:00")


async def ask(pilot, text: str) -> ChatScreen:
    chat = await ready_chat(pilot)
    await pilot.press(*text)
    await pilot.press("enter")
    return chat


def test_chat_mid_generation(snap_compare, tmp_path: Path) -> None:
    engine = FakeEngine(gate_after=9)

    async def run_before(pilot) -> None:
        chat = await ask(pilot, "How does RACER draft tokens?")
        await wait_for(pilot, engine.paused.is_set)
        await drain(pilot, chat)
        await wait_for(pilot, lambda: not chat.redraws.due)  # the steps so far drawn (at the redraw pace)

    assert snap_compare(make_app(tmp_path, engine), terminal_size=SIZE, run_before=run_before)


async def finish_reply(pilot) -> None:
    chat = await ask(pilot, "How does RACER draft tokens?")
    await wait_for(pilot, lambda: chat.stats.steps and not chat.generating)
    await pilot.pause()


def test_chat_after_completion(snap_compare, tmp_path: Path) -> None:
    assert snap_compare(make_app(tmp_path, FakeEngine()), terminal_size=SIZE, run_before=finish_reply)


def test_chat_with_an_image(snap_compare, tmp_path: Path) -> None:
    """A sent image in the user's turn and one attached to the next message,
    both as their text stand-ins (headless: never drawn, so the frame is fixed)."""
    from fake_engine import send_a_picture_and_attach_another

    async def run_before(pilot) -> None:
        await send_a_picture_and_attach_another(pilot, await ready_chat(pilot), tmp_path)

    assert snap_compare(make_app(tmp_path, FakeEngine(vision=True)), terminal_size=SIZE, run_before=run_before)


def test_chat_small_terminal(snap_compare, tmp_path: Path) -> None:
    """80x24: no sidebar, the chart as a sparkline in the status line."""
    assert snap_compare(make_app(tmp_path, FakeEngine()), terminal_size=SMALL, run_before=finish_reply)


def test_chat_markdown_view(snap_compare, tmp_path: Path) -> None:
    async def run_before(pilot) -> None:
        chat = await ask(pilot, "How does RACER draft tokens?")
        await wait_for(pilot, lambda: chat.stats.steps and not chat.generating)
        await pilot.press("ctrl+t")
        await pilot.pause()
        pilot.app.clear_notifications()
        await pilot.pause()

    assert snap_compare(make_app(tmp_path, FakeEngine()), terminal_size=SIZE, run_before=run_before)


async def start_bench(pilot, end: str) -> BenchScreen:
    await ready_chat(pilot)
    await pilot.press("f3")
    bench = pilot.app.screen
    bench.query_one("#q-end").value = end
    bench.query_one("#methods").select("retrieval")
    bench.action_start()
    return bench


def test_dashboard_running(snap_compare, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(runner, "_clock", clock.perf_counter)
    # warm-up (3 short replies), then 3 methods x 4 questions; hold inside question 3
    engine = FakeEngine(clock=clock, gate_after=230, vary=True)

    async def run_before(pilot) -> None:
        bench = await start_bench(pilot, "4")
        await wait_for(pilot, engine.paused.is_set)
        await drain(pilot, bench)
        await wait_for(pilot, lambda: not bench.flight_redraws.due)  # the in-flight chart drawn (at the pace)

    assert snap_compare(make_app(tmp_path, engine), terminal_size=SIZE, run_before=run_before)


def finished_dashboard(monkeypatch: pytest.MonkeyPatch):
    clock = FakeClock()
    monkeypatch.setattr(runner, "_clock", clock.perf_counter)
    engine = FakeEngine(clock=clock, vary=True)

    async def run_before(pilot) -> None:
        bench = await start_bench(pilot, "4")
        await wait_for(pilot, lambda: bench.result is not None)
        await pilot.pause()

    return engine, run_before


def test_dashboard_finished(snap_compare, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine, run_before = finished_dashboard(monkeypatch)
    assert snap_compare(make_app(tmp_path, engine), terminal_size=SIZE, run_before=run_before)


def test_dashboard_small_terminal(snap_compare, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """80x24: the setup column folded away, the charts across the width."""
    engine, run_before = finished_dashboard(monkeypatch)
    assert snap_compare(make_app(tmp_path, engine), terminal_size=SMALL, run_before=run_before)


def test_settings_screen(snap_compare, tmp_path: Path) -> None:
    async def run_before(pilot) -> None:
        await ready_chat(pilot)
        await pilot.press("f4")
        await pilot.pause()

    assert snap_compare(make_app(tmp_path, FakeEngine()), terminal_size=SIZE, run_before=run_before)


def test_help_screen(snap_compare, tmp_path: Path) -> None:
    async def run_before(pilot) -> None:
        await ready_chat(pilot)
        await pilot.press("f1")
        await pilot.pause()

    assert snap_compare(make_app(tmp_path, FakeEngine()), terminal_size=SIZE, run_before=run_before)


def test_model_error_view(snap_compare, tmp_path: Path) -> None:
    factory = failing_factory("no model at /models/missing.gguf: no such file")

    async def run_before(pilot) -> None:
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ModelErrorScreen))
        await pilot.pause()

    app = make_app(tmp_path, factory, model_path="/models/missing.gguf")
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_step_inspector(snap_compare, tmp_path: Path) -> None:
    async def run_before(pilot) -> None:
        chat = await ask(pilot, "How does RACER draft tokens?")
        await wait_for(pilot, lambda: chat.stats.steps and not chat.generating)
        await pilot.press("ctrl+o", "home", "right", "right")  # step 2 (after the prompt's pass): 4 tokens
        await pilot.pause()

    assert snap_compare(make_app(tmp_path, FakeEngine()), terminal_size=SIZE, run_before=run_before)


def test_regenerated_reply(snap_compare, tmp_path: Path) -> None:
    """F12 replaces the last reply: one exchange on screen, the new reply (its
    script changed first, so the two differ) and its chart."""
    engine = FakeEngine()

    async def run_before(pilot) -> None:
        chat = await ask(pilot, "How does RACER draft tokens?")
        await wait_for(pilot, lambda: chat.stats.steps and not chat.generating)
        engine.reply = engine.reply.replace("two cheap sources", "two sources that cost little")
        await pilot.press("f12")
        await wait_for(pilot, lambda: len(engine.prompts) == 2 and not chat.generating)
        await pilot.pause()

    assert snap_compare(make_app(tmp_path, engine), terminal_size=SIZE, run_before=run_before)
