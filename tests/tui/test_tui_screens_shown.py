"""What the SVG snapshots show, asserted: a snapshot can be regenerated without
looking, these cannot. Each test drives the app as its snapshot in
test_tui_snapshots.py does and checks the behaviour on the screen's text (what
a user reads) and in the widgets: the help screen lists the keys, the settings
form shows the settings, a reply mid-generation shows its partial text and
chart, the running dashboard its progress, a chat its images' stand-ins."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from app_pilot import StartApp
from fake_engine import REPLY, FakeClock, FakeEngine, drain, tokenize, wait_for
from rich.console import Console
from textual.binding import Binding
from textual.widgets import Input, Select, Switch

from racer_core.bench import runner
from racer_tui.screens.bench import BenchScreen
from racer_tui.screens.chat import ChatScreen
from racer_tui.screens.help import BUILTIN_KEYS, HelpScreen
from racer_tui.screens.settings import SettingsScreen, field_text
from racer_tui.widgets.step_chart import StepChart
from racer_tui.widgets.turns import ReplyTurn, UserTurn


def screen_text(app) -> str:
    """The screen as plain text: what the snapshot draws, without its styles."""
    console = Console(width=app.size.width, height=app.size.height, file=io.StringIO(), record=True,
                      color_system=None, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()


async def ask(pilot, text: str) -> ChatScreen:
    from fake_engine import ready_chat

    chat = await ready_chat(pilot)
    await pilot.press(*text, "enter")
    return chat


async def test_the_help_screen_lists_every_key_with_what_it_does(start_app: StartApp) -> None:
    pilot = await start_app()
    chat = await ask(pilot, "")
    await pilot.press("f1")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, HelpScreen))
    await pilot.pause()
    table = pilot.app.screen._table()
    rows = {(str(key).strip(), str(text)) for key, text in zip(table.columns[0]._cells, table.columns[1]._cells,
                                                                strict=True)}
    for key, text in BUILTIN_KEYS:
        assert (key, text) in rows, key
    shown = 0
    for binding in [*pilot.app.BINDINGS, *chat.BINDINGS]:  # every key of the app and the chat, described
        if not isinstance(binding, Binding) or binding.system or binding.action == "quit" or not binding.description:
            continue
        keys = ", ".join(pilot.app.get_key_display(Binding(k, "")) for k in binding.key.split(","))
        assert (keys, binding.description) in rows, (keys, binding.description)
        shown += 1
    assert shown >= 10
    text = screen_text(pilot.app)
    assert "Keys" in text and "Command palette: every action by name" in text and "Escape closes" in text
    await pilot.press("escape")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ChatScreen))


async def test_the_settings_form_shows_the_current_settings(start_app: StartApp) -> None:
    pilot = await start_app()
    await ask(pilot, "")
    pilot.app.update_settings(max_new_tokens=77, temperature=0.5, top_p=0.9, method="retrieval",
                              enable_thinking=True, learn_from_chats=False)
    await pilot.press("f4")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, SettingsScreen))
    await pilot.pause()
    form = pilot.app.screen
    generation = pilot.app.settings.generation
    assert form.query_one("#method", Select).value == "retrieval"
    inputs = {i.id: i.value for i in form.query(Input)}
    assert inputs["max_new_tokens"] == "77" and inputs["temperature"] == "0.5" and inputs["top_p"] == "0.9"
    for name, value in inputs.items():  # every number field shows its setting (an unset seed: empty)
        assert value == field_text(getattr(generation, name)), name
    assert inputs["seed"] == "" and {"sample_top_k", "min_p", "repetition_penalty"} <= set(inputs)
    assert form.query_one("#enable_thinking", Select).value == "on"
    assert form.query_one("#learn_from_chats", Switch).value is False
    text = screen_text(pilot.app)
    assert "77" in text and "retrieval" in text
    # what it shows is what it saves: Escape keeps the settings unchanged
    await pilot.press("escape")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ChatScreen))
    assert pilot.app.settings.generation == generation


async def test_a_reply_mid_generation_shows_its_text_and_chart_so_far(start_app: StartApp) -> None:
    engine = FakeEngine(gate_after=9)
    pilot = await start_app(engine)
    chat = await ask(pilot, "How does RACER draft tokens?")
    await wait_for(pilot, engine.paused.is_set)
    await drain(pilot, chat)
    await wait_for(pilot, lambda: not chat.redraws.due)  # the steps so far drawn (at the redraw pace)
    assert chat.generating
    partial = chat.query_one(ReplyTurn).content
    words = tokenize(REPLY)
    assert 0 < len(partial) < len(REPLY) and REPLY.startswith(partial)
    # held at the fake's ninth step: the prefill's token, then a bar per verification step, its tokens
    chart = chat.query_one(StepChart)
    assert chart.lengths == [3, 1, 4, 2, 1, 5, 2, 1]
    assert partial == "".join(words[: 1 + sum(chart.lengths)])
    text = screen_text(pilot.app)
    assert "How does RACER draft tokens?" in text
    assert partial.splitlines()[-1].strip() in text  # the partial reply is on screen, as written so far
    assert "streaming" in chat.query_one(ReplyTurn).border_subtitle
    engine.release()
    await wait_for(pilot, lambda: not chat.generating)
    assert chat.query_one(ReplyTurn).content == REPLY


async def test_the_running_dashboard_shows_its_progress(
        start_app: StartApp, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(runner, "_clock", clock.perf_counter)
    # warm-up (3 short replies), then 3 methods x 4 questions; hold inside question 3
    engine = FakeEngine(clock=clock, gate_after=230, vary=True)
    pilot = await start_app(engine)
    await ask(pilot, "")
    await pilot.press("f3")
    bench = pilot.app.screen
    assert isinstance(bench, BenchScreen)
    bench.query_one("#q-end").value = "4"
    bench.query_one("#methods").select("retrieval")
    bench.action_start()
    await wait_for(pilot, engine.paused.is_set)
    await drain(pilot, bench)
    assert bench.running
    board = bench.board
    done = {m: board.per_method[m].replies for m in board.methods}
    assert board.question_count == 4 and board.in_flight
    # question by question, each method in turn
    assert sum(done.values()) == len(board.methods) * board.flight_index + board.methods.index(board.flight_method)
    assert 0 < sum(done.values()) < 12  # part of the way
    text = screen_text(pilot.app)
    for method, count in done.items():  # each method's progress row: its finished answers of 4
        assert any(method in line and f"{count}/4" in line for line in text.splitlines()), (method, count)
    assert board.flight_place() in text  # the question in flight
    await pilot.press("escape")
    engine.release()
    await wait_for(pilot, lambda: bench.result is not None)


async def test_a_chat_with_an_image_shows_its_stand_ins(start_app: StartApp, tmp_path: Path) -> None:
    from fake_engine import send_a_picture_and_attach_another

    from racer_tui.widgets.chat_image import AttachmentBar

    engine = FakeEngine(vision=True)
    pilot = await start_app(engine)
    chat = await ask(pilot, "")
    await send_a_picture_and_attach_another(pilot, chat, tmp_path)
    assert chat.query_one(UserTurn).render_text() == "[image cat.png 24×16]\nWhat is in this picture?"
    bar = chat.query_one(AttachmentBar)
    assert bar.display and "[image dog.jpg 8×8]" in str(bar.render())
    text = screen_text(pilot.app)
    assert "[image cat.png 24×16]" in text and "[image dog.jpg 8×8]" in text
    assert engine.images == [[(str(tmp_path / "cat.png"), chat.conv.images[0][0].sha256)]]
