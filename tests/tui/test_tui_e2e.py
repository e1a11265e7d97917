"""The app on the real engine: a tiny random-weight model (racer_core.testing),
and the real loader refusing a bad path."""

from __future__ import annotations

from pathlib import Path

import pytest
from app_pilot import StartApp
from fake_engine import wait_for

from racer_tui.engine_loader import default_engine_factory
from racer_tui.screens.chat import ChatScreen
from racer_tui.screens.model_error import ModelErrorScreen
from racer_tui.widgets.bars import StepBars
from racer_tui.widgets.turns import ReplyTurn

pytest.importorskip("torch")


async def test_chat_streams_from_the_real_engine_on_a_tiny_model(start_app: StartApp) -> None:
    from racer_core.testing import tiny_engine

    def factory(model_path, *, device="auto", dtype="auto", progress=None):
        return tiny_engine("llama")

    pilot = await start_app(factory)
    app = pilot.app
    app.update_settings(max_new_tokens=24, max_num_draft=8)
    await wait_for(pilot, lambda: app.engine is not None and isinstance(app.screen, ChatScreen), 120)
    chat = app.screen
    await pilot.press(*"The quick brown fox")
    await pilot.press("enter")
    await wait_for(pilot, lambda: chat.stats.steps and not chat.generating, 120)
    turn = chat.query_one(ReplyTurn)
    stats = app.history.messages(chat.chat_id)[-1].stats
    assert stats["finish_reason"] in ("eos", "length")
    assert 0 < chat.stats.tokens <= 24 and chat.stats.steps <= chat.stats.tokens
    assert sum(chat.query_one(StepBars).lengths) == chat.stats.tokens - 1  # the prefill's token has no bar
    assert chat.conv.messages[-1] == {
        "role": "assistant",
        "content": app.history.messages(chat.chat_id)[-1].content,
    }
    assert turn.complete and "tiny-llama" in str(chat.query_one("#status").render())


async def test_real_loader_error_is_shown_not_raised(start_app: StartApp, tmp_path: Path) -> None:
    pilot = await start_app(default_engine_factory, model_path=str(tmp_path / "missing.gguf"))
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, ModelErrorScreen), 120)
    error = app.screen.error
    assert "missing.gguf" in error and "\n" not in error and "Traceback" not in error
