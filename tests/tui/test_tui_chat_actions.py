"""The chat actions users expect, driven by keys, the palette's actions and the
original chat's `!!` commands: history, engine conversation and view agree
after each, and nothing the user typed or kept is lost on a refusal."""

from __future__ import annotations

import json
from pathlib import Path

from app_pilot import SIZE, StartApp
from fake_engine import REPLY, FakeEngine, make_app, ready_chat, wait_for
from textual.widgets import Input, OptionList

from racer_core.common.events import Source
from racer_tui.screens.chat import ChatScreen
from racer_tui.screens.chat_dialogs import LineScreen, SearchScreen
from racer_tui.screens.confirm import ConfirmScreen
from racer_tui.widgets.chat_list import ChatList
from racer_tui.widgets.prompt_input import PromptInput
from racer_tui.widgets.step_chart import StepChart
from racer_tui.widgets.turns import ReplyTurn, UserTurn


async def say(pilot, chat: ChatScreen, text: str) -> None:
    """Type `text`, send it and wait for the whole reply."""
    before = chat.reply_id
    await pilot.press(*text, "enter")
    await wait_for(pilot, lambda: chat.reply_id > before and not chat.generating)
    await pilot.pause()


def turns(chat: ChatScreen) -> list[tuple[str, str]]:
    return [("user", w.message) if isinstance(w, UserTurn) else ("assistant", w.content)
            for w in chat.conversation_view.children if isinstance(w, UserTurn | ReplyTurn)]


def stored(chat: ChatScreen) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in chat.host.history.messages(chat.chat_id)] if chat.chat_id else []


def consistent(chat: ChatScreen) -> list[tuple[str, str]]:
    """History, view and the engine's conversation hold the same turns."""
    history = stored(chat)
    assert turns(chat) == history
    if chat.conv is not None:
        assert [(m["role"], m["content"]) for m in chat.conv.messages if m["role"] != "system"] == history
    return history


def notices(pilot) -> list[str]:
    return [n.message for n in pilot.app._notifications]


async def dialog(pilot, kind: type) -> None:
    """Wait until a dialog of this kind is up, its input ready to type in."""
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, kind) and pilot.app.screen.query(Input))
    await pilot.pause()


async def command(pilot, text: str) -> None:
    """Type one of the original chat's `!!` commands in the prompt box."""
    await pilot.press(*text, "enter")
    await pilot.pause()
    await pilot.pause()


async def test_regenerate_the_last_reply(start_app: StartApp) -> None:
    engine = FakeEngine(vary=True)
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    await say(pilot, chat, "first")
    await say(pilot, chat, "second")
    old_reply = chat.reply_id
    await pilot.press("f12")
    await wait_for(pilot, lambda: chat.reply_id > old_reply and not chat.generating)
    await pilot.pause()
    assert [text for text, _ in engine.prompts] == ["first", "second", "second"]
    sent = engine.prompts[-1][1]  # the engine saw the first exchange once, then "second" once
    assert [m["content"] for m in sent] == ["first", engine.reply_for("first"), "second"]
    assert [r for r, _ in consistent(chat)] == ["user", "assistant", "user", "assistant"]
    assert chat.steps.steps(old_reply) == [] and chat.steps.steps(chat.reply_id)  # the old trees are let go
    assert len(chat.query_one(StepChart).lengths) == chat.stats.steps > 0
    await command(pilot, "!!regen")
    await wait_for(pilot, lambda: not chat.generating and len(engine.prompts) == 4)
    await pilot.pause()
    assert engine.prompts[-1][0] == "second" and len(consistent(chat)) == 4
    assert chat.query_one(PromptInput).text == ""  # the command ran: the prompt is cleared


async def test_regenerate_refusals_lose_nothing(start_app: StartApp) -> None:
    engine = FakeEngine(gate_after=2)
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    await pilot.press("f12")
    await pilot.pause()
    assert any("no message to take back" in m for m in notices(pilot))
    await pilot.press(*"hello", "enter")
    await wait_for(pilot, engine.paused.is_set)
    await pilot.press("f12")  # a reply is streaming: refused, nothing changes
    await pilot.pause()
    assert any("A reply is streaming" in m for m in notices(pilot))
    engine.release()
    await wait_for(pilot, lambda: not chat.generating)
    await pilot.pause()
    before = consistent(chat)
    chat.host.claim_engine("bench")  # as a running benchmark does
    await pilot.press("f12")
    await pilot.pause()
    assert any("a benchmark is running" in m for m in notices(pilot))
    assert consistent(chat) == before == [("user", "hello"), ("assistant", REPLY)]
    chat.host.release_engine()


async def test_edit_and_resend_the_last_message(start_app: StartApp) -> None:
    engine = FakeEngine()
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    await say(pilot, chat, "frist")
    await pilot.press("up")  # in the empty prompt: the last message comes back to edit
    await pilot.pause()
    prompt = chat.query_one(PromptInput)
    assert prompt.text == "frist"
    assert consistent(chat) == [("user", "frist"), ("assistant", REPLY)]  # nothing taken back yet
    prompt.text = "first"
    await say(pilot, chat, "")
    assert [text for text, _ in engine.prompts] == ["frist", "first"]
    assert engine.prompts[-1][1] == [{"role": "user", "content": "first"}]
    assert consistent(chat) == [("user", "first"), ("assistant", REPLY)]
    assert prompt.text == ""


async def test_an_edit_given_up_keeps_the_exchange(start_app: StartApp) -> None:
    pilot = await start_app(FakeEngine())
    chat = await ready_chat(pilot)
    await pilot.press("up")  # nothing to edit yet
    await pilot.pause()
    assert any("no message to edit" in m for m in notices(pilot))
    await say(pilot, chat, "keep me")
    prompt = chat.query_one(PromptInput)
    prompt.text = "a draft"
    await pilot.app.run_action("screen.edit_last", chat)  # the palette's entry
    await pilot.pause()
    assert prompt.text == "a draft" and any("not empty" in m for m in notices(pilot))  # the draft stays
    prompt.text = "line one\nline two"
    prompt.move_cursor(prompt.document.end)
    await pilot.press("up")  # in a prompt with text, Up moves the cursor as ever
    assert prompt.cursor_location[0] == 0 and prompt.text == "line one\nline two"
    prompt.clear()
    await pilot.press("up")
    await pilot.pause()
    assert prompt.text == "keep me"
    await pilot.press("escape")  # give the edit up: the exchange stays, the text is now a new message
    await pilot.pause()
    await say(pilot, chat, "")
    assert consistent(chat) == [("user", "keep me"), ("assistant", REPLY)] * 2


async def test_remove_the_last_exchange(start_app: StartApp) -> None:
    pilot = await start_app(FakeEngine(vary=True))
    chat = await ready_chat(pilot)
    await say(pilot, chat, "one")
    first_lengths = list(chat.query_one(StepChart).lengths)
    first_reply = chat.reply_id
    await say(pilot, chat, "two")
    await command(pilot, "!!remove")
    assert [t for _, t in consistent(chat)][0] == "one" and len(stored(chat)) == 2
    chart = chat.query_one(StepChart)
    assert chart.lengths == first_lengths  # the chart shows the reply that is now last
    assert chat._chart_reply == first_reply  # and its steps can still be inspected
    await pilot.app.run_action("screen.remove_last", chat)
    await pilot.pause()
    assert consistent(chat) == [] and chart.lengths == []
    await command(pilot, "!!remove")
    assert any("no message to take back" in m for m in notices(pilot))
    await command(pilot, "!!remove now")
    assert any("!!remove takes no argument" in m for m in notices(pilot))
    assert chat.query_one(PromptInput).text == "!!remove now"  # a refused command stays typed


async def test_copy_the_last_reply(start_app: StartApp) -> None:
    pilot = await start_app(FakeEngine())
    chat = await ready_chat(pilot)
    await pilot.app.run_action("screen.copy_reply", chat)
    await pilot.pause()
    assert any("no reply to copy" in m for m in notices(pilot))
    await say(pilot, chat, "hello")
    await command(pilot, "!!copy")
    assert pilot.app.clipboard == REPLY


async def test_rename_and_search_chats(start_app: StartApp) -> None:
    pilot = await start_app(FakeEngine())
    chat = await ready_chat(pilot)
    await say(pilot, chat, "about cats")
    cats = chat.chat_id
    await pilot.press("ctrl+n")
    await say(pilot, chat, "about dogs")
    dogs = chat.chat_id
    # rename from the chat list: the open chat is highlighted, r renames it
    chat.query_one(ChatList).focus()
    await pilot.press("r")
    await dialog(pilot, LineScreen)
    pilot.app.screen.query_one(Input).value = ""
    await pilot.press(*"Dog questions", "enter")
    await wait_for(pilot, lambda: pilot.app.screen is chat)
    assert chat.host.history.title(dogs) == "Dog questions"
    assert "Dog questions" in [str(o.prompt).split("\n")[0] for o in chat.query_one(ChatList).options]
    # and from the palette's action, for the open chat; a blank title is refused
    await pilot.app.run_action("screen.rename_chat", chat)
    await dialog(pilot, LineScreen)
    pilot.app.screen.query_one(Input).value = "  "
    await pilot.press("enter", "escape")
    await wait_for(pilot, lambda: pilot.app.screen is chat)
    assert chat.host.history.title(dogs) == "Dog questions"
    # search by content, any case: "cats" is only in the first chat's message
    await pilot.press("ctrl+f")
    await dialog(pilot, SearchScreen)
    results = pilot.app.screen.query_one(OptionList)
    assert results.option_count == 2  # an empty query lists every chat
    await pilot.press(*"CATS")
    await pilot.pause()
    assert [str(o.prompt).split("  ")[0] for o in results.options] == ["about cats"]
    await pilot.press("enter")
    await wait_for(pilot, lambda: chat.chat_id == cats and chat.query(UserTurn))
    await pilot.pause()
    assert consistent(chat)[0] == ("user", "about cats")
    await pilot.press("ctrl+f", *"zebra")
    await pilot.pause()
    assert [str(o.prompt) for o in pilot.app.screen.query_one(OptionList).options] == ["no chat matches"]
    await pilot.press("enter", "escape")
    await wait_for(pilot, lambda: pilot.app.screen is chat)
    assert chat.chat_id == cats


async def test_save_and_load_round_trip(start_app: StartApp, tmp_path: Path) -> None:
    pilot = await start_app(FakeEngine())
    chat = await ready_chat(pilot)
    await say(pilot, chat, "keep this")
    saved = chat.host.history.messages(chat.chat_id)
    first_chat = chat.chat_id
    target = tmp_path / "saved"
    await command(pilot, f"!!save {target}")
    path = tmp_path / "saved.json"  # the original's rule: a name without an extension gets ".json"
    data = json.loads(path.read_text())
    assert [(m["role"], m["content"]) for m in data] == [("user", "keep this"), ("assistant", REPLY)]
    await command(pilot, f"!!load {target}")  # and NAME.json is found for NAME
    await wait_for(pilot, lambda: len(chat.host.history.list_chats()) == 2 and chat.chat_id != first_chat)
    await pilot.pause()
    assert chat.host.history.messages(chat.chat_id) == saved  # text, colour runs and statistics
    assert chat.host.history.messages(first_chat) == saved  # the open chat stays as it was
    assert Source.RETRIEVAL in {s for s, _ in chat.query(ReplyTurn).last().runs}
    assert chat.query_one(StepChart).lengths == saved[-1].stats["accept_lengths"]
    # Ctrl+S with no name: the export folder
    await pilot.press("ctrl+s")
    await dialog(pilot, LineScreen)
    await pilot.press("enter")
    await wait_for(pilot, lambda: pilot.app.screen is chat)
    exported = chat.host.export_dir / f"chat-{chat.chat_id}.json"
    assert json.loads(exported.read_text()) == data


async def test_load_reads_the_original_chats_files_and_refuses_bad_ones(start_app: StartApp, tmp_path: Path) -> None:
    pilot = await start_app(FakeEngine())
    chat = await ready_chat(pilot)
    # the original's own file: a system prompt first, a user turn in its list-of-parts form
    original = tmp_path / "original.json"
    original.write_text(json.dumps([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": "hello"},
    ]))
    await pilot.app.run_action("screen.load_chat", chat)
    await dialog(pilot, LineScreen)
    await pilot.press(*str(original), "enter")
    await wait_for(pilot, lambda: len(chat.host.history.list_chats()) == 1 and chat.query(ReplyTurn))
    await pilot.pause()
    assert consistent(chat) == [("user", "hi"), ("assistant", "hello")]
    assert chat.host.history.system_prompt(chat.chat_id) == "Be brief."
    assert chat.query_one(".system-turn")  # shown above the turns
    # a bad file is one clear line, the command stays typed, and no chat is made
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps([{"role": "robot", "content": "beep"}]))
    wrong_stats = tmp_path / "stats.json"
    wrong_stats.write_text(json.dumps([{"role": "user", "content": "q"},
                                       {"role": "assistant", "content": "a", "racer_stats": {"steps": "many"}}]))
    await command(pilot, f"!!load {bad}")
    assert f"{bad} is not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2)" in notices(pilot)[-1]
    assert chat.query_one(PromptInput).text == f"!!load {bad}"
    chat.query_one(PromptInput).clear()
    await command(pilot, f"!!load {tmp_path / 'nowhere'}")
    assert "no such file" in notices(pilot)[-1]
    chat.query_one(PromptInput).clear()
    await command(pilot, f"!!load {odd}")
    assert "message 1: expected" in notices(pilot)[-1]
    chat.query_one(PromptInput).clear()
    await command(pilot, "!!load")
    assert "usage: !!load PATH" in notices(pilot)[-1]
    chat.query_one(PromptInput).clear()
    assert len(chat.host.history.list_chats()) == 1
    await command(pilot, f"!!load {wrong_stats}")  # statistics that do not fit are dropped, the text kept
    await wait_for(pilot, lambda: len(chat.host.history.list_chats()) == 2)
    await pilot.pause()
    assert consistent(chat) == [("user", "q"), ("assistant", "a")]
    await command(pilot, "!!bogus")
    assert "Unknown command !!bogus" in notices(pilot)[-1]


async def test_save_refusals(start_app: StartApp, tmp_path: Path) -> None:
    pilot = await start_app(FakeEngine())
    chat = await ready_chat(pilot)
    await command(pilot, "!!save")
    assert "Nothing to save yet" in notices(pilot)[-1]
    chat.query_one(PromptInput).clear()
    await say(pilot, chat, "hello")
    (tmp_path / "a-folder.json").mkdir()
    await command(pilot, f"!!save {tmp_path / 'a-folder.json'}")
    assert "Cannot write" in notices(pilot)[-1]
    assert not list(tmp_path.glob("*.tmp"))  # no half-written file left behind


async def test_the_last_chat_reopens_at_start(tmp_path: Path) -> None:
    async with make_app(tmp_path, FakeEngine()).run_test(size=SIZE) as pilot:
        chat = await ready_chat(pilot)
        await say(pilot, chat, "older")
        await pilot.press("ctrl+n")
        await say(pilot, chat, "newest")
        newest = chat.chat_id

    engine = FakeEngine()
    async with make_app(tmp_path, engine).run_test(size=SIZE) as pilot:
        chat = await ready_chat(pilot)
        await wait_for(pilot, lambda: chat.chat_id == newest and chat.query(ReplyTurn))
        await pilot.pause()
        assert consistent(chat) == [("user", "newest"), ("assistant", REPLY)]
        assert chat.query_one(StepChart).lengths
        assert chat.query_one(ChatList).highlighted_chat() == newest
        await say(pilot, chat, "and now?")  # the reply follows the reopened turns
        assert engine.prompts[0][1][:2] == [{"role": "user", "content": "newest"},
                                            {"role": "assistant", "content": REPLY}]


async def test_save_never_replaces_a_file_unasked_nor_makes_folders(start_app: StartApp, tmp_path: Path) -> None:
    """Issue 29, bug 9: `!!save` refuses an existing file (`!!save!` replaces
    it; Ctrl+S asks) and a path whose folder does not exist."""
    pilot = await start_app(FakeEngine())
    chat = await ready_chat(pilot)
    await say(pilot, chat, "hello")
    missing = tmp_path / "no-such-folder" / "x.json"
    await command(pilot, f"!!save {missing}")
    assert "does not exist" in notices(pilot)[-1]
    assert not missing.parent.exists()
    chat.query_one(PromptInput).clear()
    kept = tmp_path / "kept.json"
    kept.write_text("precious")
    await command(pilot, f"!!save {kept}")
    assert "!!save!" in notices(pilot)[-1] and kept.read_text() == "precious"
    assert chat.query_one(PromptInput).text == f"!!save {kept}"  # the line stays to fix
    chat.query_one(PromptInput).clear()
    await command(pilot, f"!!save! {kept}")
    assert json.loads(kept.read_text())[0]["content"] == "hello"
    # Ctrl+S asks before replacing: escape keeps the file, y replaces it
    kept.write_text("precious")
    for answer in ("escape", "y"):
        await pilot.press("ctrl+s")
        await dialog(pilot, LineScreen)
        pilot.app.screen.query_one(Input).value = str(kept)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen))
        await pilot.press(answer)
        await wait_for(pilot, lambda: pilot.app.screen is chat)
        if answer == "escape":
            assert kept.read_text() == "precious"
    assert json.loads(kept.read_text())[0]["content"] == "hello"


async def test_regenerate_with_sampling(start_app: StartApp) -> None:
    """Issue 29: F12 at temperature 0 gives the same reply again; `!!regen T`
    and Shift+F12 regenerate sampled, the reply's note says at what temperature."""
    engine = FakeEngine()
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    await say(pilot, chat, "hello")
    assert engine.configs[-1].temperature == 0.0
    await command(pilot, "!!regen 0.7")
    await wait_for(pilot, lambda: len(engine.configs) == 2 and not chat.generating)
    await pilot.pause()
    assert engine.configs[-1].temperature == 0.7
    assert consistent(chat) == [("user", "hello"), ("assistant", REPLY)]  # one exchange, replaced
    assert "T 0.7" in str(chat.query(ReplyTurn).last().border_subtitle)
    assert chat.host.settings.generation.temperature == 0.0  # the settings stay as they were
    await command(pilot, "!!regen hot")
    assert "!!regen T" in notices(pilot)[-1] and len(engine.configs) == 2
    assert chat.query_one(PromptInput).text == "!!regen hot"
    chat.query_one(PromptInput).clear()
    await pilot.press("shift+f12")
    await wait_for(pilot, lambda: len(engine.configs) == 3 and not chat.generating)
    assert engine.configs[-1].temperature == 0.8
    await pilot.press("f12")
    await wait_for(pilot, lambda: len(engine.configs) == 4 and not chat.generating)
    assert engine.configs[-1].temperature == 0.0


async def test_help_lists_the_prompt_commands(start_app: StartApp) -> None:
    from rich.console import Console

    from racer_tui.screens.help import HelpScreen

    pilot = await start_app()
    await ready_chat(pilot)
    await pilot.press("f1")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, HelpScreen))
    console = Console(width=100, record=True)
    console.print(pilot.app.screen._table())
    text = console.export_text()
    for usage in ("!!regen T", "!!remove", "!!save [PATH]", "!!save! PATH", "!!load PATH", "!!copy", "!!reset",
                  "!!exit"):
        assert usage in text
