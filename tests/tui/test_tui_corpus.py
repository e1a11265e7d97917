"""Learning from earlier chats (racer_core/drafting/corpus.py) in the app: on by default,
a setting turns it off at once, the settings screen clears it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from app_pilot import StartApp
from fake_engine import FakeEngine, make_app, ready_chat, wait_for

from racer_tui.screens.chat import ChatScreen
from racer_tui.screens.settings import SettingsScreen


async def send(pilot, chat: ChatScreen, engine: FakeEngine, text: str) -> None:
    count = len(engine.configs)
    await pilot.press(*text, "enter")
    await wait_for(pilot, lambda: len(engine.configs) > count and not chat.generating)


async def test_chats_learn_by_default_and_the_setting_stops_it_at_once(start_app: StartApp, tmp_path: Path) -> None:
    engine = FakeEngine()
    pilot = await start_app(engine)
    app = pilot.app
    chat = await ready_chat(pilot)
    assert app.settings.learn_from_chats
    await send(pilot, chat, engine, "hi")
    assert engine.learned == [True]

    await pilot.press("f4")
    form = app.screen
    assert isinstance(form, SettingsScreen)
    assert form.query_one("#learn_from_chats").value is True
    form.query_one("#learn_from_chats").value = False
    form.action_save()
    await pilot.pause()
    assert isinstance(app.screen, ChatScreen)
    await send(pilot, chat, engine, "again")  # the same chat: no longer learning
    assert engine.learned == [True, False]
    await pilot.press("ctrl+n")
    await send(pilot, chat, engine, "new")
    assert engine.conversations[-1].learn is False and engine.learned[-1] is False

    saved = json.loads((tmp_path / "config" / "settings.json").read_text())
    assert saved["learn_from_chats"] is False
    assert make_app(tmp_path, FakeEngine()).settings.learn_from_chats is False


async def test_the_settings_screen_clears_what_chats_taught(start_app: StartApp) -> None:
    folder = Path(os.environ["RACER_TUI_CACHE_DIR"]) / "corpus"
    folder.mkdir(parents=True)
    (folder / "another-model.npz").write_bytes(b"kept from an earlier run")
    engine = FakeEngine()
    pilot = await start_app(engine)
    app = pilot.app
    await ready_chat(pilot)
    await pilot.press("f4")
    await pilot.click("#clear-corpus")
    await pilot.pause()
    assert engine.forgotten == 1  # the loaded model's corpus, in memory
    assert not list(folder.glob("*.npz"))  # every model's file
    assert any("Cleared what earlier chats taught" in n.message for n in app._notifications)
    assert isinstance(app.screen, SettingsScreen)  # the form stays open, unsaved


async def test_a_damaged_corpus_is_told_once(start_app: StartApp) -> None:
    engine = FakeEngine(notice="The chat corpus x.npz is not readable; moved it to x.npz.damaged-1 and started empty.")
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    await send(pilot, chat, engine, "hi")
    assert [n.message for n in pilot.app._notifications if "chat corpus" in n.message] == [engine.notice]


async def test_the_palette_clears_them_too(start_app: StartApp) -> None:
    engine = FakeEngine()
    pilot = await start_app(engine)
    await ready_chat(pilot)
    await pilot.app.run_action("clear_learned_drafts")
    assert engine.forgotten == 1
    titles = {c.title for c in pilot.app.get_system_commands(pilot.app.screen)}
    assert "Clear learned drafts" in titles
