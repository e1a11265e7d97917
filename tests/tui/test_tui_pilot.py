"""The app driven like a user would, on the scripted engine (tests/fake_engine.py).

Async tests (pytest-asyncio, auto mode) on the `start_app` Pilot fixture of tests/tui/conftest.py.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from app_pilot import SIZE, SMALL, StartApp
from fake_engine import (
    REPLY,
    FakeEngine,
    factory_for,
    failing_factory,
    make_app,
    open_dashboard,
    ready_chat,
    tokenize,
    wait_for,
)

from racer_core.common.config import DEFAULTS
from racer_core.common.errors import ModelLoadError, RacerError
from racer_core.common.events import Source
from racer_tui.colors import LOGITS_GREEN, RETRIEVAL_GREEN
from racer_tui.history import HistoryStore, StoredMessage
from racer_tui.screens.bench import BENCH_MAX_NEW_TOKENS, BenchScreen
from racer_tui.screens.chat import ChatScreen
from racer_tui.screens.confirm import ConfirmScreen
from racer_tui.screens.help import HelpScreen
from racer_tui.screens.model_error import ModelErrorScreen
from racer_tui.screens.model_picker import ModelPickerScreen
from racer_tui.screens.settings import SettingsScreen
from racer_tui.settings import SettingsStore
from racer_tui.widgets.bars import StepBars, sparkline
from racer_tui.widgets.bench_charts import FlightChart, SpeedChart
from racer_tui.widgets.prompt_input import PromptInput
from racer_tui.widgets.turns import ReplyTurn, UserTurn


async def chat_ready(start_app: StartApp, engine: FakeEngine):
    """The app started on `engine`: its pilot, the app, and the chat screen once loaded."""
    pilot = await start_app(engine)
    return pilot, pilot.app, await ready_chat(pilot)


async def send(pilot, text: str) -> None:
    await pilot.press(*text)
    await pilot.press("enter")


async def open_picker(pilot, path: Path) -> ModelPickerScreen:
    """The model picker over a ready chat, with `path` typed in as a custom model."""
    await ready_chat(pilot)
    await pilot.press("f5")
    picker = pilot.app.screen
    assert isinstance(picker, ModelPickerScreen)
    await pilot.click("#custom")
    picker.query_one("#model-path").value = str(path)
    return picker


async def test_prompt_streams_coloured_reply(start_app: StartApp) -> None:
    engine = FakeEngine()

    pilot, app, chat = await chat_ready(start_app, engine)
    await pilot.press(*"two")
    await pilot.press("ctrl+j")
    await send(pilot, "lines")
    await wait_for(pilot, lambda: chat.stats.steps and not chat.generating)
    assert engine.prompts[0][0] == "two\nlines"
    turn = chat.query_one(ReplyTurn)
    assert turn.content == REPLY
    sources = {s for s, _ in turn.runs}
    assert sources == {Source.MODEL, Source.RETRIEVAL, Source.LOGITS}
    styles = {str(span.style) for span in turn._text.spans}
    assert {RETRIEVAL_GREEN, LOGITS_GREEN} <= styles
    lengths = chat.query_one(StepBars).lengths
    assert sum(lengths) == len(tokenize(REPLY)) - 1 and max(lengths) > 1  # the prefill's token has no bar
    assert chat.query_one(PromptInput).text == ""
    stored = app.history.messages(chat.chat_id)
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[1].stats["finish_reason"] == "eos"


async def test_escape_stops_and_the_conversation_stays_consistent(start_app: StartApp) -> None:
    engine = FakeEngine(gate_after=5)

    pilot, app, chat = await chat_ready(start_app, engine)
    await send(pilot, "first")
    await wait_for(pilot, engine.paused.is_set)
    assert chat.generating
    await pilot.press("escape")
    await wait_for(pilot, lambda: not chat.generating)
    turn = chat.query_one(ReplyTurn)
    assert "stopped" in turn.border_subtitle
    partial = turn.content
    assert 0 < len(partial) < len(REPLY) and REPLY.startswith(partial)
    stored = app.history.messages(chat.chat_id)
    assert stored[-1].content == partial and stored[-1].stats["finish_reason"] == "cancelled"
    # the engine's conversation kept the same partial reply, and goes on from it
    engine.release()
    await send(pilot, "again")
    await wait_for(pilot, lambda: len(engine.prompts) == 2 and not chat.generating)
    history = engine.prompts[1][1]
    assert history[-3:] == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": partial},
        {"role": "user", "content": "again"},
    ]


async def test_escape_closes_the_floating_chat_list_before_it_stops_the_reply(start_app: StartApp) -> None:
    """Issue 41 (5): at 80x24 Escape over the floating chat list closed nothing and stopped the reply."""
    engine = FakeEngine(gate_after=5)
    pilot = await start_app(engine, size=SMALL)
    chat = await ready_chat(pilot)
    await send(pilot, "first")
    await wait_for(pilot, engine.paused.is_set)
    await pilot.press("ctrl+b")
    assert chat.has_class("-sidebar-floating")
    await pilot.press("escape")  # the overlay goes; the reply goes on
    assert not chat.has_class("-sidebar-floating") and not chat.query_one("#sidebar").display
    assert chat.generating and not chat._stop.is_set() and isinstance(pilot.app.focused, PromptInput)
    await pilot.press("escape")  # nothing over it now: this one stops the reply
    await wait_for(pilot, lambda: not chat.generating)
    assert "stopped" in chat.query_one(ReplyTurn).border_subtitle


async def test_switch_screens_and_help(start_app: StartApp) -> None:
    pilot = await start_app(FakeEngine())
    app = pilot.app
    await ready_chat(pilot)
    await pilot.press("f3")
    assert isinstance(app.screen, BenchScreen)
    await pilot.press("f2")
    assert isinstance(app.screen, ChatScreen)
    await pilot.press("f4")
    assert isinstance(app.screen, SettingsScreen)
    await pilot.press("escape")
    await pilot.press("f5")
    assert isinstance(app.screen, ModelPickerScreen)
    await pilot.press("escape")
    await pilot.press("f1")
    assert isinstance(app.screen, HelpScreen)
    table = app.screen._table()
    keys = set(table.columns[0]._cells)
    for key in ("ctrl+p", "ctrl+q", "esc", "^n", "^g", "f1", "f3", "⏎", "^j"):
        assert any(key in str(k) for k in keys), key
    await pilot.press("escape")
    assert isinstance(app.screen, ChatScreen)
    titles = {c.title for c in app.get_system_commands(app.screen)}
    assert {"New chat", "Settings", "Model", "Benchmark dashboard", "Help: all keys", "Export chat"} <= titles


async def test_history_survives_a_restart(tmp_path: Path) -> None:
    async with make_app(tmp_path, FakeEngine()).run_test(size=SIZE) as pilot:
        chat = await ready_chat(pilot)
        await send(pilot, "remember me")
        await wait_for(pilot, lambda: chat.stats.steps and not chat.generating)

    engine = FakeEngine()
    async with make_app(tmp_path, engine).run_test(size=SIZE) as pilot:
        app = pilot.app
        chat = await ready_chat(pilot)
        chats = app.history.list_chats()
        assert [c.title for c in chats] == ["remember me"]
        await chat.open_chat(chats[0].id)
        await pilot.pause()
        turn = chat.query_one(ReplyTurn)
        assert turn.content == REPLY and Source.RETRIEVAL in {s for s, _ in turn.runs}
        assert chat.query_one(StepBars).lengths  # the chart of the last reply is back
        await send(pilot, "and now?")
        await wait_for(pilot, lambda: engine.prompts and not chat.generating)
        assert engine.prompts[0][1][:2] == [
            {"role": "user", "content": "remember me"},
            {"role": "assistant", "content": REPLY},
        ]


async def test_bad_model_path_shows_the_error_view_then_the_default_loads(start_app: StartApp) -> None:
    engine = FakeEngine()

    def factory(model_path, *, device="auto", dtype="auto", progress=None):
        if model_path:
            raise ModelLoadError(f"no model at {model_path}")
        return engine

    pilot = await start_app(factory, model_path="/nope/model.gguf")
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, ModelErrorScreen))
    assert app.screen.error == "no model at /nope/model.gguf"
    assert app.engine is None
    await pilot.press("d")
    await ready_chat(pilot)
    assert app.engine is engine and app.settings.model_path is None


async def test_unexpected_loader_exception_is_one_line(start_app: StartApp) -> None:
    def factory(model_path, **kwargs):
        raise RuntimeError("weights are corrupt")

    pilot = await start_app(factory)
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, ModelErrorScreen))
    assert app.screen.error == "RuntimeError: weights are corrupt"


async def test_model_picker_validates_and_loads(start_app: StartApp, tmp_path: Path) -> None:
    loads: list[str | None] = []
    engine = FakeEngine()

    def factory(model_path, **kwargs):
        loads.append(model_path)
        return engine

    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()

    pilot = await start_app(factory)
    app = pilot.app
    picker = await open_picker(pilot, checkpoint)
    picker.action_load()
    await pilot.pause()
    assert "config.json" in str(picker.query_one("#picker-error").render())
    assert app.screen is picker
    (checkpoint / "config.json").write_text("{}")
    picker.action_load()
    await wait_for(pilot, lambda: len(loads) == 2 and isinstance(app.screen, ChatScreen))
    assert loads == [None, str(checkpoint)]
    assert app.settings.model_path == str(checkpoint)


async def test_model_picker_saves_a_model_only_once_it_loaded(start_app: StartApp, tmp_path: Path) -> None:
    engine = FakeEngine()

    def factory(model_path, **kwargs):
        if model_path:
            raise ModelLoadError(f"cannot load {model_path}")
        return engine

    checkpoint = tmp_path / "broken-ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")  # passes the picker's checks, fails to load
    pilot = await start_app(factory)
    app = pilot.app
    picker = await open_picker(pilot, checkpoint)
    picker.query_one("#dtype").value = "float16"
    picker.action_load()
    await wait_for(pilot, lambda: isinstance(app.screen, ModelErrorScreen))
    assert app.screen.error == f"cannot load {checkpoint}"
    saved = SettingsStore(tmp_path / "config" / "settings.json").load()
    assert (app.settings.model_path, saved.model_path, saved.dtype) == (None, None, "auto")
    await pilot.press("r")  # retry tries the picked model again, still unsaved
    await wait_for(pilot, lambda: isinstance(app.screen, ModelErrorScreen))
    assert app.settings.model_path is None
    await pilot.press("d")
    await ready_chat(pilot)
    assert app.settings.model_path is None and app.settings.dtype == "float16"


async def test_settings_are_validated_saved_and_used(start_app: StartApp, tmp_path: Path) -> None:
    engine = FakeEngine()

    pilot, app, chat = await chat_ready(start_app, engine)
    await pilot.press("f4")
    form = app.screen
    form.query_one("#max_num_draft").value = "lots"
    form.action_save()
    await pilot.pause()
    assert isinstance(app.screen, SettingsScreen)
    assert "max_num_draft must be 'auto' or a whole number" in str(form.query_one("#settings-errors").render())
    form.query_one("#max_num_draft").value = "12"
    form.query_one("#temperature").value = "0.5"
    form.query_one("#method").value = "retrieval"
    form.action_save()
    await pilot.pause()
    assert isinstance(app.screen, ChatScreen)
    await send(pilot, "go")
    await wait_for(pilot, lambda: engine.configs and not chat.generating)
    cfg = engine.configs[0]
    assert (cfg.max_num_draft, cfg.temperature, cfg.method) == (12, 0.5, "retrieval")

    saved = json.loads((tmp_path / "config" / "settings.json").read_text())
    assert saved["max_num_draft"] == 12 and saved["method"] == "retrieval"
    assert make_app(tmp_path, FakeEngine()).settings.generation.temperature == 0.5


async def test_engine_error_rolls_the_turn_back(start_app: StartApp) -> None:
    engine = FakeEngine(fail_with=RacerError("prompt too long for this model"))

    pilot, app, chat = await chat_ready(start_app, engine)
    await send(pilot, "hello")
    await wait_for(pilot, lambda: not chat.generating and engine.prompts)
    await pilot.pause()
    assert chat.query_one(PromptInput).text == "hello"  # nothing typed is lost
    assert not chat.query(ReplyTurn)
    # issue 41 (8): the chat its first message made is gone again, from the history and the list
    assert chat.chat_id is None and app.history.list_chats() == []
    assert not chat.query_one("#sidebar").option_count
    assert chat.conv is None  # rebuilt from the stored history next time


async def test_markdown_export_delete_and_system_prompt(start_app: StartApp, tmp_path: Path) -> None:
    engine = FakeEngine()

    pilot, app, chat = await chat_ready(start_app, engine)
    await pilot.press("ctrl+r")
    app.screen.query_one("#system-text").text = "Answer like a pirate."
    await pilot.press("ctrl+s")
    await send(pilot, "hi")
    await wait_for(pilot, lambda: chat.stats.steps and not chat.generating)
    assert engine.conversations[-1].system_prompt == "Answer like a pirate."
    await pilot.press("ctrl+t")
    turn = chat.query_one(ReplyTurn)
    assert turn._markdown is not None and turn._markdown.display and not turn._body.display
    assert app.settings.markdown
    await pilot.press("f9")
    exported = (tmp_path / "data" / "exports" / f"chat-{chat.chat_id}.md").read_text()
    assert "Answer like a pirate." in exported and "**You:**" in exported
    chat_id = chat.chat_id
    chat.action_delete_chat()
    await pilot.pause()
    assert isinstance(app.screen, ConfirmScreen)
    await pilot.press("y")
    await wait_for(pilot, lambda: chat.chat_id is None)
    assert app.history.list_chats() == [] and app.history.messages(chat_id) == []
    assert not chat.query(ReplyTurn)


async def test_benchmark_runs_writes_answers_and_opens_them_again(start_app: StartApp, tmp_path: Path) -> None:
    engine = FakeEngine()

    pilot = await start_app(engine)
    bench = await open_dashboard(pilot)
    bench.query_one("#q-end").value = "2"
    bench.action_start()
    await wait_for(pilot, lambda: bench.result is not None)
    assert not bench.running and bench.result.completed
    answers = tmp_path / "data" / "bench" / "builtin" / "fake-model"
    assert sorted(p.name for p in answers.glob("*.jsonl")) == ["ar.jsonl", "racer.jsonl"]
    assert bench.board.per_method["racer"].replies == 2
    assert bench.board.per_method["racer"].mat > bench.board.per_method["ar"].mat == 1.0
    table = bench.query_one("#bench-table").render()
    assert "racer" in str(table) or bench.result.method_totals()["racer"].stats.replies == 2
    # open the folder again as a previous result
    bench.result = None
    bench.query_one("#results-dir").value = str(answers)
    bench.action_open_results()
    assert bench.result is not None and bench.board.per_method["ar"].replies == 2
    bench.query_one("#results-dir").value = str(tmp_path / "empty")
    bench.action_open_results()  # a folder without answers: a message, no crash
    assert bench.board.per_method["ar"].replies == 2


async def test_benchmark_stop_and_bad_inputs(start_app: StartApp, tmp_path: Path) -> None:
    engine = FakeEngine(gate_after=40)

    pilot = await start_app(engine)
    app = pilot.app
    bench = await open_dashboard(pilot)
    bench.query_one("#q-begin").value = "500"
    bench.action_start()
    assert not bench.running  # no questions in that range
    bench.query_one("#q-begin").value = ""
    bench.query_one("#suite").value = "file"
    bench.query_one("#suite-file").value = str(tmp_path / "missing.jsonl")
    bench.action_start()
    assert not bench.running
    bench.query_one("#suite").value = "builtin"
    bench.action_start()
    await wait_for(pilot, engine.paused.is_set)
    assert bench.running and app.engine_user == "bench"
    await pilot.press("escape")
    await wait_for(pilot, lambda: bench.result is not None)
    assert not bench.result.completed and not bench.running and app.engine_user is None


async def test_loading_view_reports_progress(start_app: StartApp) -> None:
    from racer_tui.screens.loading import LoadingScreen

    gate = threading.Event()
    seen: list[str] = []

    def factory(model_path, *, device="auto", dtype="auto", progress=None):
        progress("dequantizing weights", 0.25)
        gate.wait(20)  # the test reads the loading view meanwhile
        return FakeEngine()

    pilot = await start_app(factory)
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, LoadingScreen))
    screen = app.screen
    await wait_for(pilot, lambda: "dequantizing" in str(screen.query_one("#loading-message").render()))
    seen.append(str(screen.query_one("#loading-message").render()))
    assert screen.query_one("#loading-bar").percentage == 0.25
    # only what this start does, as the loader says it: no fixed line about a first start
    shown = [str(s.render()) for s in screen.query("#loading-box > Static") if s.id != "loading-model"]
    assert shown == ["Loading model", "dequantizing weights"]
    gate.set()
    await ready_chat(pilot)

    assert seen == ["dequantizing weights"]


async def test_a_message_typed_while_the_model_loads_is_sent_once_it_is_ready(start_app: StartApp) -> None:
    """The loading view takes the first message: Enter queues it (a second
    Enter is refused, the text stays typed), and once the engine is ready the
    chat sends it as if typed there; what was still being typed stays in the prompt."""
    from racer_tui.screens.loading import EARLY_HINT, LoadingScreen

    gate = threading.Event()
    engine = FakeEngine()

    def factory(model_path, *, device="auto", dtype="auto", progress=None):
        gate.wait(20)  # the test types meanwhile
        return engine

    pilot = await start_app(factory)
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, LoadingScreen))
    loading = app.screen
    assert app.focused is loading.query_one(PromptInput)
    assert str(loading.query_one("#early-hint").render()) == EARLY_HINT
    await pilot.press(*"hello there", "enter")
    assert "Waiting for the model, then sent: hello there" in str(loading.query_one("#early-hint").render())
    await pilot.press(*"and more", "enter")  # one message waits at most: this one stays typed
    assert loading.carry() == ("hello there", "and more")
    assert engine.prompts == []
    gate.set()
    chat = await ready_chat(pilot)
    await wait_for(pilot, lambda: not chat.generating and engine.prompts)
    assert engine.calls == [("racer", "hello there")]
    assert chat.query_one(PromptInput).text == "and more"


async def test_a_message_typed_while_a_load_fails_waits_for_the_next_load(start_app: StartApp) -> None:
    from racer_tui.screens.loading import LoadingScreen

    gate = threading.Event()

    def failing(model_path, *, device="auto", dtype="auto", progress=None):
        gate.wait(20)
        raise ModelLoadError("cannot read model.gguf")

    pilot = await start_app(failing)
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, LoadingScreen))
    await pilot.press(*"hi", "enter", *"draft")
    gate.set()
    await wait_for(pilot, lambda: isinstance(app.screen, ModelErrorScreen))
    engine = FakeEngine()
    app.engine_factory = factory_for(engine)
    await pilot.press("r")
    chat = await ready_chat(pilot)
    await wait_for(pilot, lambda: not chat.generating and engine.prompts)
    assert engine.calls == [("racer", "hi")] and chat.query_one(PromptInput).text == "draft"


async def test_factory_helpers_cover_failure(start_app: StartApp) -> None:
    pilot = await start_app(failing_factory("cannot read model.gguf"))
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, ModelErrorScreen))
    app.engine_factory = factory_for(FakeEngine())
    await pilot.press("r")
    await ready_chat(pilot)


async def test_damaged_history_is_salvaged_at_start_with_one_notice(start_app: StartApp, tmp_path: Path) -> None:
    path = tmp_path / "data" / "history.sqlite3"
    store = HistoryStore(path)
    for title in ("first", "second"):
        store.add_message(store.create_chat(title), StoredMessage("user", f"about {title}"))
    store.close()
    path.write_bytes(b"\x00" * 100 + path.read_bytes()[100:])  # the header overwritten
    pilot = await start_app()
    app = pilot.app
    await ready_chat(pilot)
    notices = [n.message for n in app._notifications]
    assert len(notices) == 1 and "2 chats (2 turns) were salvaged" in notices[0]
    assert sorted(c.title for c in app.history.list_chats()) == ["first", "second"]
    assert list(path.parent.glob("history.sqlite3.damaged-*"))


async def test_an_unreadable_chat_shows_an_error_in_its_place(start_app: StartApp, tmp_path: Path) -> None:
    path = tmp_path / "data" / "history.sqlite3"
    store = HistoryStore(path)
    good = store.create_chat("good")
    store.add_message(good, StoredMessage("user", "fine"))
    bad = store.create_chat("bad")
    store.add_message(bad, StoredMessage("assistant", "x", [(Source.MODEL, "x")], {"steps": 1}))
    store._db.execute('UPDATE messages SET stats = \'{"steps": "many"}\' WHERE chat_id = ?', (bad,))
    store._db.commit()
    store.close()
    pilot = await start_app()
    chat = await ready_chat(pilot)
    await chat.open_chat(bad)
    await pilot.pause()
    error = chat.query_one(".error-turn")
    assert f"chat {bad} cannot be read" in str(error.render()) and not chat.query(ReplyTurn)
    chat.export_chat(bad)  # a notice, not a crash
    await chat.open_chat(good)
    await pilot.pause()
    assert not chat.query(".error-turn") and [t.render_text() for t in chat.query(UserTurn)] == ["fine"]


# -- any terminal ------------------------------------------------------------------


async def test_small_terminal_folds_the_sidebar_and_the_chart(start_app: StartApp) -> None:
    pilot = await start_app(size=SMALL)
    app = pilot.app
    chat = await ready_chat(pilot)
    sidebar, side = chat.query_one("#sidebar"), chat.query_one("#chat-side")
    assert not sidebar.display and not side.display
    await send(pilot, "first")
    await wait_for(pilot, lambda: chat.stats.steps and not chat.generating)
    status = str(chat.query_one("#status").render())
    assert status.startswith(sparkline(chat.query_one(StepBars).lengths, 16)) and "tok/s" in status
    assert chat.query_one("#prompt").size.width >= 70  # the conversation has the width
    await pilot.press("ctrl+n")
    await pilot.press("ctrl+b")  # the chat list floats over the conversation
    assert sidebar.display and chat.has_class("-sidebar-floating") and app.focused is sidebar
    assert sidebar.region.x == 0 and chat.query_one("#chat-main").region.x == 0
    await pilot.press("down", "enter")  # open the first chat: the list makes way
    await wait_for(pilot, lambda: chat.chat_id is not None)
    assert not sidebar.display and isinstance(app.focused, PromptInput)
    await pilot.press("ctrl+g")  # the chart comes back beside the conversation
    assert side.display and not str(chat.query_one("#status").render()).startswith("▁")
    await pilot.press("ctrl+b", "escape")  # escape closes the floating list too
    assert not sidebar.display


async def test_wide_terminal_shows_every_panel_and_each_can_be_hidden(start_app: StartApp) -> None:
    pilot = await start_app()
    chat = await ready_chat(pilot)
    sidebar, side = chat.query_one("#sidebar"), chat.query_one("#chat-side")
    assert sidebar.display and side.display and not chat.has_class("-sidebar-floating")
    await pilot.press("ctrl+b", "ctrl+g")
    assert not sidebar.display and not side.display
    assert str(chat.query_one("#status").render()).startswith("no steps │")
    await pilot.resize_terminal(*SMALL)  # the user's choice holds at any width
    await pilot.pause()
    assert not sidebar.display and not side.display
    await pilot.press("ctrl+b", "ctrl+g")
    assert sidebar.display and side.display


async def test_dashboard_on_a_small_terminal(start_app: StartApp) -> None:
    pilot = await start_app(size=SMALL)
    bench = await open_dashboard(pilot)
    controls = bench.query_one("#bench-controls")
    assert not controls.display
    await pilot.press("ctrl+b")
    assert controls.display and bench.has_class("-controls-floating")
    bench.query_one("#q-end").value = "1"
    await pilot.press("ctrl+g")
    assert not controls.display  # a run makes way for the charts
    await wait_for(pilot, lambda: bench.result is not None)


async def test_dashboard_sets_max_new_tokens_and_keeps_the_last_question(start_app: StartApp) -> None:
    engine = FakeEngine()
    pilot = await start_app(engine)
    app = pilot.app
    bench = await open_dashboard(pilot)
    field = bench.query_one("#max-new-tokens")
    assert field.value == str(BENCH_MAX_NEW_TOKENS)
    bench.query_one("#q-end").value = "2"
    for bad in ("0", ""):
        field.value = bad
        bench.action_start()
        assert not bench.running and not engine.configs
    field.value = "7"
    bench.action_start()
    assert "in flight" in bench.query_one(FlightChart).title
    await wait_for(pilot, lambda: bench.result is not None)
    assert {c.max_new_tokens for c in engine.configs} == {7}
    assert app.settings.generation.max_new_tokens == DEFAULTS.max_new_tokens  # the chat's stays
    assert bench.query_one(FlightChart).title.startswith("last question: racer · question")
    info = str(bench.query_one("#bench-info").render())
    answers = Path(os.environ["RACER_TUI_DATA_DIR"]) / "bench" / "builtin" / "fake-model"
    assert "data folder" not in info and app.show_path(answers) in info.replace("\n", "")
    lines = str(bench.query_one(SpeedChart).render()).splitlines()
    axis = next(i for i, line in enumerate(lines) if "└" in line)
    assert lines[axis + 1].split() == ["1", "2"]  # whole question numbers, not 1.25, 1.50…
