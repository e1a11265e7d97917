"""Structured output in the app. The chat's JSON mode: `!!json PROMPT` for one
reply, the setting for every reply; the engine gets Grammar("json_object"),
the prompt goes without the prefix, the status line and the reply's note say
JSON, and the grammar's forced tokens show in its colour. The dashboard's
`structured` suite: a schema per question, refused in one line without llguidance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from app_pilot import StartApp
from fake_engine import FakeEngine, open_dashboard, ready_chat, wait_for

from racer_core.bench.runner import WARMUP_PROMPT
from racer_core.common import grammar_engine as library
from racer_core.common import registry
from racer_core.common.events import Source
from racer_core.common.grammar import Grammar
from racer_tui.chat.json_mode import split_json_prefix
from racer_tui.screens.chat import ChatScreen
from racer_tui.screens.settings import SettingsScreen
from racer_tui.widgets.prompt_input import PromptInput
from racer_tui.widgets.status_line import StatusLine
from racer_tui.widgets.turns import ReplyTurn

JSON = Grammar("json_object")


async def _send(pilot, chat: ChatScreen, engine: FakeEngine, text: str) -> None:
    """Type `text` and send it; wait until its reply has ended."""
    sent = len(engine.configs)
    chat.query_one(PromptInput).text = text
    await pilot.press("enter")
    await wait_for(pilot, lambda: len(engine.configs) > sent and not chat.generating)


def _status(chat: ChatScreen) -> str:
    return str(chat.query_one(StatusLine).render())


def test_the_prefix_is_split_off_only_as_a_word():
    assert split_json_prefix("!!json list three colours") == ("list three colours", True)
    assert split_json_prefix("!!json\nline one") == ("line one", True)
    assert split_json_prefix("!!json") == ("", True)
    assert split_json_prefix("!!jsonify this") == ("!!jsonify this", False)
    assert split_json_prefix("say !!json") == ("say !!json", False)


async def test_json_prefix_constrains_one_reply_and_is_left_out_of_the_message(start_app: StartApp) -> None:
    engine = FakeEngine(forced=True)
    pilot = await start_app(engine)
    app, chat = pilot.app, await ready_chat(pilot)
    await _send(pilot, chat, engine, "!!json list three colours")
    assert engine.configs[0].grammar == JSON
    assert engine.prompts[0][0] == "list three colours"
    stored = app.history.messages(chat.chat_id)
    assert stored[0].content == "list three colours"
    assert stored[1].stats["grammar"] == "json_object"
    assert "JSON" in _status(chat)
    assert "JSON" in str(chat.query(ReplyTurn).last().border_subtitle)  # the reply's note
    # the grammar's forced tokens are drawn in its colour
    turn = chat.query(ReplyTurn).last()
    assert Source.GRAMMAR in {s for s, _ in turn.runs}
    assert registry.GRAMMAR.colour in {str(span.style) for span in turn._text.spans}

    await pilot.press("f12")  # regenerated as it was asked: JSON
    await wait_for(pilot, lambda: len(engine.configs) == 2 and not chat.generating)
    assert engine.configs[1].grammar == JSON and engine.prompts[1][0] == "list three colours"

    await _send(pilot, chat, engine, "and now in words")  # the next reply is free again
    assert engine.configs[2].grammar is None
    assert "JSON" not in _status(chat)
    await pilot.press("f12")
    await wait_for(pilot, lambda: len(engine.configs) == 4 and not chat.generating)
    assert engine.configs[3].grammar is None


async def test_json_prefix_alone_sends_nothing(start_app: StartApp) -> None:
    engine = FakeEngine()
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    chat.query_one(PromptInput).text = "!!json"
    await pilot.press("enter")
    await pilot.pause()
    assert engine.configs == []
    assert chat.query_one(PromptInput).text == "!!json"  # kept, to finish typing


async def test_the_json_mode_setting_constrains_every_reply(start_app: StartApp, tmp_path: Path) -> None:
    engine = FakeEngine()
    pilot = await start_app(engine)
    app, chat = pilot.app, await ready_chat(pilot)
    await pilot.press("f4")
    form = app.screen
    assert isinstance(form, SettingsScreen)
    form.query_one("#json_mode").value = True
    form.action_save()
    await pilot.pause()
    assert isinstance(app.screen, ChatScreen)
    assert "JSON" in _status(chat)  # before any reply: what the next one gets
    await _send(pilot, chat, engine, "one")
    await _send(pilot, chat, engine, "two")
    assert [c.grammar for c in engine.configs] == [JSON, JSON]
    assert "JSON" in _status(chat)
    saved = json.loads((tmp_path / "config" / "settings.json").read_text())
    assert saved["json_mode"] is True


async def test_the_dashboard_runs_the_structured_suite_under_each_schema(start_app: StartApp) -> None:
    engine = FakeEngine(forced=True)
    pilot = await start_app(engine)
    bench = await open_dashboard(pilot)
    bench.query_one("#suite").value = "structured"
    bench.query_one("#q-end").value = "2"
    bench.action_start()
    await wait_for(pilot, lambda: bench.result is not None)
    runs = [c for c, (text, _) in zip(engine.configs, engine.prompts, strict=True) if text != WARMUP_PROMPT]
    assert runs and all(c.grammar is not None and c.grammar.kind == "json_schema" for c in runs)
    assert bench.result.constrained
    assert bench.result.method_totals()["racer"].stats.grammar > 0


async def test_the_dashboard_refuses_the_structured_suite_without_llguidance(
    start_app: StartApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = FakeEngine()
    pilot = await start_app(engine)
    bench = await open_dashboard(pilot)
    monkeypatch.setattr(library, "available", lambda: False)
    bench.query_one("#suite").value = "structured"
    bench.action_start()
    await pilot.pause()
    assert not bench.running and engine.configs == []
    assert any("[structured]" in str(n.message) for n in pilot.app._notifications)


async def test_an_edited_message_sent_with_the_prefix_is_answered_as_json(start_app: StartApp) -> None:
    engine = FakeEngine()
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    await _send(pilot, chat, engine, "colours")
    await pilot.press("up")  # the last message comes back to edit
    await pilot.pause()
    await _send(pilot, chat, engine, "!!json colours")
    assert [c.grammar for c in engine.configs] == [None, JSON]
    assert engine.prompts[-1][1] == [{"role": "user", "content": "colours"}]  # it replaced the exchange
