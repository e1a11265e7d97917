"""The chat app on a tiny real VL model: an image attached with F10, and the
original's inline `<image>PATH</image>` syntax in the prompt box, reach the
model (the reply is the engine's own reply with the picture, which differs
from its reply without it); a reopened chat shows the model only the pictures
whose files are unchanged; a text-only model refuses an image in one line and
the chat stays usable."""

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


def engine_reply(engine, chat: ChatScreen, images: dict[int, tuple]) -> str:
    """The engine's own greedy reply to the chat's last message, after the same
    earlier messages, with `images` (message index -> pictures) and nothing else."""
    conv = engine.new_conversation()
    *earlier, asked, _reply = chat.conv.messages
    conv.messages.extend(dict(m) for m in earlier)
    conv.images.update(images)
    config = chat.host.settings.generation.replace(method="ar")
    for _ in conv.send(asked["content"], config):
        pass
    return conv.messages[-1]["content"]


def assert_the_picture_reached_the_model(engine, chat: ChatScreen, index: int, picture: Path) -> None:
    """The app's last reply is the one the picture at message `index` gives, not the one without it."""
    from racer_core.engine.chat_image import load_image

    seen = chat.conv.messages[-1]["content"]
    with_it = engine_reply(engine, chat, {index: (load_image(str(picture)),)})
    without = engine_reply(engine, chat, {})
    assert with_it != without  # the tiny model reads the picture
    assert seen == with_it


async def test_an_inline_image_reaches_a_vl_model_through_the_chat(start_app: StartApp, tmp_path: Path) -> None:
    from racer_core.testing.tiny_vl import tiny_vl_engine

    picture = cat_picture(tmp_path)
    engine = tiny_vl_engine("qwen2_5_vl")
    pilot, chat = await start_small(start_app, lambda: engine)
    await pilot.press(*f"<image>{picture}</image> The cat", "enter")
    await wait_for(pilot, replied(chat), 120)
    assert chat.stats.tokens > 0
    assert chat.conv.messages[0]["content"] == "The cat"
    assert len(chat.conv.images[0]) == 1 and chat.conv.images[0][0].path.endswith("cat.png")
    assert_the_picture_reached_the_model(engine, chat, 0, picture)


async def test_an_image_attached_by_key_reaches_a_vl_model(start_app: StartApp, tmp_path: Path) -> None:
    from racer_core.testing.tiny_vl import tiny_vl_engine

    picture = cat_picture(tmp_path)
    engine = tiny_vl_engine("qwen2_5_vl")
    pilot, chat = await start_small(start_app, lambda: engine)
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
    assert_the_picture_reached_the_model(engine, chat, 0, picture)


async def test_a_reopened_chat_shows_the_model_the_unchanged_picture_only(
        start_app: StartApp, tmp_path: Path) -> None:
    from racer_core.testing.tiny_vl import tiny_image, tiny_vl_engine
    from racer_tui.chat.attachments import read_attachment

    kept, changed = cat_picture(tmp_path), tmp_path / "changed.png"
    tiny_image(seed=4).save(changed)
    engine = tiny_vl_engine("qwen2_5_vl")
    pilot, chat = await start_small(start_app, lambda: engine)
    chat.attached.extend([read_attachment(str(changed)), read_attachment(str(kept))])
    await pilot.press(*"Two pictures", "enter")
    await wait_for(pilot, replied(chat), 120)
    tiny_image(seed=5).save(changed)  # edited after it was sent
    chat_id = chat.chat_id
    await chat.action_new_chat()
    await chat.open_chat(chat_id)
    await pilot.pause()
    before = chat.reply_id
    await pilot.press(*"And now", "enter")
    await wait_for(pilot, lambda: chat.reply_id > before and replied(chat)(), 120)
    assert [m["content"] for m in chat.conv.messages[::2]] == ["Two pictures", "And now"]
    assert_the_picture_reached_the_model(engine, chat, 0, kept)


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
