"""The chat app on a tiny real VL model: an image attached with F10, and the
original's inline `<image>PATH</image>` syntax in the prompt box, reach the
model; a text-only model refuses an image in one line and the chat stays usable."""

from __future__ import annotations

from pathlib import Path

import pytest
from app_pilot import StartApp
from fake_engine import ready_chat, wait_for

from racer_tui.screens.attach_image import AttachImageScreen
from racer_tui.screens.chat import ChatScreen
from racer_tui.widgets.prompt_input import PromptInput
from racer_tui.widgets.turns import UserTurn

pytest.importorskip("torch")


def cat_picture(tmp_path: Path) -> Path:
    from racer_core.testing.tiny_vl import tiny_image

    path = tmp_path / "cat.png"
    tiny_image(seed=2).save(path)
    return path


async def start_small(start_app: StartApp, engine_factory) -> tuple[object, ChatScreen]:
    pilot = await start_app(lambda *a, **k: engine_factory())
    pilot.app.update_settings(max_new_tokens=12, max_num_draft=8)
    return pilot, await ready_chat(pilot)


def replied(chat: ChatScreen):
    return lambda: chat.stats.steps and not chat.generating


async def test_an_inline_image_reaches_a_vl_model_through_the_chat(start_app: StartApp, tmp_path: Path) -> None:
    from racer_core.testing.tiny_vl import tiny_vl_engine

    picture = cat_picture(tmp_path)
    pilot, chat = await start_small(start_app, lambda: tiny_vl_engine("qwen2_5_vl"))
    await pilot.press(*f"<image>{picture}</image> The cat", "enter")
    await wait_for(pilot, replied(chat), 120)
    assert chat.stats.tokens > 0
    assert chat.conv.messages[0]["content"] == "The cat"
    assert len(chat.conv.images[0]) == 1 and chat.conv.images[0][0].path.endswith("cat.png")


async def test_an_image_attached_by_key_reaches_a_vl_model(start_app: StartApp, tmp_path: Path) -> None:
    from racer_core.testing.tiny_vl import tiny_vl_engine

    picture = cat_picture(tmp_path)
    pilot, chat = await start_small(start_app, lambda: tiny_vl_engine("qwen2_5_vl"))
    await pilot.press("f10")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, AttachImageScreen))
    await pilot.press(*str(picture), "enter")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ChatScreen) and chat.attached)
    await pilot.press(*"The cat", "enter")
    await wait_for(pilot, replied(chat), 120)
    await pilot.pause()
    assert chat.stats.tokens > 0 and not chat.attached
    (sent,) = chat.conv.images[0]
    assert sent.path == str(picture) and chat.conv.messages[0]["content"] == "The cat"
    assert chat.query_one(UserTurn).render_text().startswith("[image cat.png ")
    (stored,) = [m for m in chat.host.history.messages(chat.chat_id) if m.role == "user"]
    assert [(i.path, i.sha256) for i in stored.images] == [(sent.path, sent.sha256)]


async def test_a_text_model_refuses_an_inline_image_in_one_line(start_app: StartApp, tmp_path: Path) -> None:
    from racer_core.testing import tiny_engine

    picture = cat_picture(tmp_path)
    pilot, chat = await start_small(start_app, lambda: tiny_engine("llama"))

    def errors() -> list[str]:
        return [n.message for n in pilot.app._notifications if "reads text only" in n.message]

    await pilot.press(*f"<image>{picture}</image> The cat", "enter")
    await wait_for(pilot, lambda: errors() and not chat.generating, 120)
    await pilot.pause()
    assert errors() == ["tiny-llama reads text only: it cannot take an image"]
    assert chat.conv is None and not chat.generating
    assert chat.query_one(PromptInput).text.endswith("</image> The cat")  # the prompt is kept
