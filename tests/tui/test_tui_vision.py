"""The chat app on a tiny real VL model: the original's inline
`<image>PATH</image>` syntax in the prompt box sends the picture; a text-only
model refuses it in one line and the chat stays usable."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fake_engine import make_app, wait_for

from racer_tui.screens.chat import ChatScreen
from racer_tui.widgets.prompt_input import PromptInput

pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("tui_user_dirs")


def _chat_with_image(tmp_path: Path, engine_factory, done) -> tuple[object, object, str]:
    from racer_core.tiny_vl import tiny_image

    picture = tmp_path / "cat.png"
    tiny_image(seed=2).save(picture)
    result = {}

    async def scenario() -> None:
        app = make_app(tmp_path, lambda *a, **k: engine_factory())
        app.update_settings(max_new_tokens=12, max_num_draft=8)
        async with app.run_test(size=(120, 36)) as pilot:
            await wait_for(pilot, lambda: app.engine is not None and isinstance(app.screen, ChatScreen), 120)
            chat = app.screen
            await pilot.press(*f"<image>{picture}</image> The cat")
            await pilot.press("enter")
            await wait_for(pilot, lambda: done(app, chat), 120)
            await pilot.pause()
            result["chat"], result["app"] = chat, app
            result["prompt"] = chat.query_one(PromptInput).text

    asyncio.run(scenario())
    return result["chat"], result["app"], result["prompt"]


def test_an_inline_image_reaches_a_vl_model_through_the_chat(tmp_path: Path) -> None:
    from racer_core.tiny_vl import tiny_vl_engine

    chat, _, _ = _chat_with_image(tmp_path, lambda: tiny_vl_engine("qwen2_5_vl"),
                               lambda app, chat: chat.stats.steps and not chat.generating)
    assert chat.stats.tokens > 0
    assert chat.conv.messages[0]["content"] == "The cat"
    assert len(chat.conv.images[0]) == 1 and chat.conv.images[0][0].path.endswith("cat.png")


def test_a_text_model_refuses_an_inline_image_in_one_line(tmp_path: Path) -> None:
    from racer_core.testing import tiny_engine

    def refused(app, chat) -> bool:
        return any("reads text only" in n.message for n in app._notifications)

    chat, app, prompt = _chat_with_image(tmp_path, lambda: tiny_engine("llama"), refused)
    errors = [n.message for n in app._notifications if "reads text only" in n.message]
    assert errors == ["tiny-llama reads text only: it cannot take an image"]
    assert chat.conv is None and not chat.generating
    assert prompt.endswith("</image> The cat")  # the prompt is kept
