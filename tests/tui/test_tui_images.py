"""Images in the chat: attach one by key or from the palette, with
path completion and a check of the file; the picture's stand-in in the user's
turn; the history keeps path and hash, and a reopened chat says when the file
is gone or changed; a text-only model refuses an image and nothing is lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from app_pilot import StartApp
from fake_engine import FakeEngine, ready_chat, wait_for
from PIL import Image
from textual.command import CommandPalette

from racer_core.common.errors import InputError
from racer_core.common.events import Source
from racer_core.engine.chat_image import file_sha256
from racer_tui.chat import json_file as chat_file
from racer_tui.chat.attachments import CHANGED, MISSING, complete_path, image_label, image_state, read_attachment
from racer_tui.history import StoredImage, StoredMessage
from racer_tui.screens.attach_image import AttachImageScreen, PathInput
from racer_tui.screens.chat import ChatScreen
from racer_tui.widgets.chat_image import AttachmentBar, ImageView
from racer_tui.widgets.prompt_input import PromptInput
from racer_tui.widgets.turns import UserTurn


def picture(folder: Path, name: str = "cat.png", size: tuple[int, int] = (24, 16), colour: str = "orange") -> Path:
    path = folder / name
    Image.new("RGB", size, colour).save(path)
    return path


def notices(pilot) -> list[str]:
    return [n.message for n in pilot.app._notifications]


async def attach_by_path(pilot, path: str) -> None:
    """In the open attach prompt: type the path and press Enter."""
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, AttachImageScreen))
    await pilot.pause()
    await pilot.press(*path, "enter")
    await pilot.pause()


async def send(pilot, chat: ChatScreen, text: str) -> None:
    before = chat.reply_id
    await pilot.press(*text, "enter")
    await wait_for(pilot, lambda: chat.reply_id > before and not chat.generating)
    await pilot.pause()


# -- without the app ---------------------------------------------------------------


def test_the_path_completion_offers_folders_and_images_only(tmp_path: Path) -> None:
    picture(tmp_path, "cat.png")
    (tmp_path / "catalogue.txt").write_text("not a picture")
    (tmp_path / "cats").mkdir()
    base = f"{tmp_path}/"
    assert complete_path(base + "cat.") == base + "cat.png"
    assert complete_path(base + "cats") == base + "cats/"  # a folder ends with its separator
    assert complete_path(base + "catal") is None  # text files are not offered
    assert complete_path(base + "dog") is None and complete_path("") is None
    assert complete_path(str(tmp_path / "nowhere" / "x")) is None


def test_an_image_label_says_when_the_file_is_gone_or_changed(tmp_path: Path) -> None:
    path = picture(tmp_path)
    kept = StoredImage(str(path), file_sha256(path))
    assert image_state(kept) == "" and image_label(kept) == "[image cat.png 24×16]"
    picture(tmp_path, colour="black")
    assert image_state(kept) == CHANGED and image_label(kept) == "[image cat.png 24×16 · changed since sent]"
    path.unlink()
    assert image_state(kept) == MISSING and image_label(kept) == f"[image missing: {path}]"


def test_a_saved_chat_keeps_its_images_in_the_originals_form(tmp_path: Path) -> None:
    path = picture(tmp_path)
    image = StoredImage(str(path), file_sha256(path))
    chat = chat_file.ChatFile("", [StoredMessage("user", "what is it?", images=[image]),
                                   StoredMessage("assistant", "a cat", [(Source.MODEL, "a cat")])])
    data = chat_file.to_json(chat)
    # The original CLI writes an image as a part {"type": "image", "image": "file://PATH"}.
    assert data[0]["content"] == [{"type": "image", "image": f"file://{path}"},
                                  {"type": "text", "text": "what is it?"}]
    assert data[0]["racer_image_sha256"] == [image.sha256]
    assert "content" in data[1] and data[1]["content"] == "a cat"
    assert chat_file.from_json(json.loads(json.dumps(data))).messages == chat.messages
    # a file of the original has no hashes: the file's own, or none when it is gone
    del data[0]["racer_image_sha256"]
    data[0]["content"].insert(1, {"type": "image", "image": f"file://{tmp_path}/gone.png"})
    loaded = chat_file.from_json(data).messages[0]
    assert loaded.images == [image, StoredImage(f"{tmp_path}/gone.png", "")]
    assert loaded.content == "what is it?"


# -- in the app -----------------------------------------------------------------------


async def test_attach_by_key_shows_it_sends_it_and_keeps_it(start_app: StartApp, tmp_path: Path) -> None:
    path = picture(tmp_path)
    engine = FakeEngine(vision=True)
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    await pilot.press("f10")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, AttachImageScreen))
    await pilot.pause()
    await pilot.press(*f"{tmp_path}/ca", "tab")  # tab takes the completion
    await wait_for(pilot, lambda: pilot.app.screen.query_one(PathInput).value == str(path), 5)
    await pilot.press("enter")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ChatScreen) and chat.attached)
    bar = chat.query_one(AttachmentBar)
    assert bar.display and "[image cat.png 24×16]" in str(bar.render())
    assert chat.query_one(PromptInput).has_focus
    await send(pilot, chat, "What is it?")

    assert engine.images == [[(str(path), file_sha256(path))]]  # the engine got the picture
    assert engine.prompts[-1][0] == "What is it?"
    assert not chat.attached and not bar.display  # sent: the bar empties
    (turn,) = chat.query(UserTurn)
    assert turn.render_text() == "[image cat.png 24×16]\nWhat is it?"
    (stored,) = [m for m in chat.host.history.messages(chat.chat_id) if m.role == "user"]
    assert stored.images == [StoredImage(str(path), file_sha256(path))]


async def test_attach_from_the_palette_and_remove_it(start_app: StartApp, tmp_path: Path) -> None:
    path = picture(tmp_path)
    pilot = await start_app(FakeEngine(vision=True))
    chat = await ready_chat(pilot)
    await pilot.press("ctrl+p")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, CommandPalette))
    await pilot.press(*"Attach an image")
    await pilot.pause(0.3)
    await pilot.press("enter")
    await attach_by_path(pilot, str(path))
    await wait_for(pilot, lambda: chat.attached)
    await pilot.app.run_action("screen.detach(0)", chat)  # the ✕ in the bar
    assert not chat.attached and not chat.query_one(AttachmentBar).display
    await pilot.app.run_action("screen.detach_all", chat)  # the palette's entry: nothing left to remove
    await pilot.pause()
    assert "No image is attached." in notices(pilot)


async def test_a_bad_path_is_refused_in_one_line_and_the_prompt_stays_open(
        start_app: StartApp, tmp_path: Path) -> None:
    text = tmp_path / "notes.png"
    text.write_text("not a picture")
    pilot = await start_app(FakeEngine(vision=True))
    chat = await ready_chat(pilot)
    await pilot.press("f10")
    await attach_by_path(pilot, str(tmp_path / "nowhere.png"))
    assert isinstance(pilot.app.screen, AttachImageScreen)  # still open, the path typed, to fix
    assert f"image not found: {tmp_path / 'nowhere.png'}" in notices(pilot)
    field = pilot.app.screen.query_one(PathInput)
    assert field.value == str(tmp_path / "nowhere.png")
    field.value = str(text)
    await pilot.press("enter")
    await pilot.pause()
    assert any(n.startswith(f"not a readable image: {text}") for n in notices(pilot))
    assert all("\n" not in n for n in notices(pilot))
    await pilot.press("escape")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ChatScreen))
    assert not chat.attached


async def test_a_text_only_model_refuses_and_the_prompt_and_image_stay(start_app: StartApp, tmp_path: Path) -> None:
    path = picture(tmp_path)
    engine = FakeEngine()  # reads text only
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    await pilot.press("f10")
    await attach_by_path(pilot, str(path))
    await wait_for(pilot, lambda: chat.attached)
    await pilot.press(*"What is it?", "enter")
    await wait_for(pilot, lambda: any("reads text only" in n for n in notices(pilot)))
    await wait_for(pilot, lambda: not chat.generating)
    await pilot.pause()
    assert [n for n in notices(pilot) if "reads text only" in n] == ["fake-model reads text only: it cannot take an image"]
    assert chat.query_one(PromptInput).text == "What is it?"
    assert [i.path for i in chat.attached] == [str(path)] and chat.query_one(AttachmentBar).display
    assert not chat.query(UserTurn) and chat.host.history.messages(chat.chat_id) == []
    # without the image the same model answers
    await pilot.app.run_action("screen.detach_all", chat)
    chat.query_one(PromptInput).focus()
    await pilot.press("enter")
    await wait_for(pilot, lambda: chat.query(UserTurn) and not chat.generating)
    assert engine.images[-1] == []


async def test_an_inline_tag_is_shown_as_an_image_and_a_missing_one_refused(
        start_app: StartApp, tmp_path: Path) -> None:
    path = picture(tmp_path)
    engine = FakeEngine(vision=True)
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    await pilot.press(*f"<image>{tmp_path}/gone.png</image> hi", "enter")
    await pilot.pause()
    assert f"image not found: {tmp_path}/gone.png" in notices(pilot) and not engine.prompts
    assert chat.query_one(PromptInput).text.endswith("</image> hi")
    chat.query_one(PromptInput).clear()
    await send(pilot, chat, f"<image>{path}</image> The cat")
    assert engine.prompts[-1][0] == "The cat" and engine.images[-1] == [(str(path), file_sha256(path))]
    assert chat.query_one(UserTurn).render_text() == "[image cat.png 24×16]\nThe cat"


async def test_reopened_chat_shows_a_missing_or_changed_file_and_goes_on(start_app: StartApp, tmp_path: Path) -> None:
    gone, changed, kept = (picture(tmp_path, n) for n in ("gone.png", "changed.png", "kept.png"))
    engine = FakeEngine(vision=True)
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    for path in (gone, changed, kept):
        chat.attached.append(read_attachment(str(path)))
    await send(pilot, chat, "three pictures")
    gone.unlink()
    picture(tmp_path, "changed.png", colour="black")
    chat_id = chat.chat_id
    await chat.action_new_chat()
    await chat.open_chat(chat_id)
    await pilot.pause()
    (turn,) = chat.query(UserTurn)
    assert turn.render_text().splitlines() == [
        f"[image missing: {gone}]", "[image changed.png 24×16 · changed since sent]", "[image kept.png 24×16]",
        "three pictures"]
    assert [v.state for v in turn.query(ImageView)] == [MISSING, CHANGED, ""]
    # the chat goes on: the model is shown only the picture that is still the one sent
    await send(pilot, chat, "and now?")
    conv = engine.conversations[-1]
    assert [[i.path for i in images] for images in conv.images.values()] == [[str(kept)]]
    saved = tmp_path / "saved.json"
    assert chat.save_chat(str(saved))
    parts = json.loads(saved.read_text())[0]["content"]
    assert [p.get("image") for p in parts][:3] == [f"file://{p}" for p in (gone, changed, kept)]


def test_attachments_are_checked_before_they_are_taken(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="image not found"):
        read_attachment(str(tmp_path / "none.png"))
    relative = read_attachment(str(picture(tmp_path)).replace(str(Path.cwd()) + "/", ""))
    assert Path(relative.path).is_absolute()



async def test_a_terminal_with_graphics_gets_the_picture_drawn(
        start_app: StartApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Headless runs always show the stand-in; here textual-image's own widget
    (its half-cell renderer, which needs no terminal reply) draws the picture,
    except for a file that is gone since it was sent."""
    from textual_image.widget import HalfcellImage

    from racer_tui.widgets import chat_image

    monkeypatch.setattr(chat_image, "picture_class", lambda app: HalfcellImage)
    path = picture(tmp_path)
    pilot = await start_app(FakeEngine(vision=True))
    chat = await ready_chat(pilot)
    chat.attached.append(read_attachment(str(path)))
    await send(pilot, chat, "What is it?")
    (drawn,) = chat.query(HalfcellImage)
    assert drawn.image == str(path) and drawn.size.height == chat_image.PICTURE_ROWS and drawn.size.width > 0
    assert chat.query_one(UserTurn).render_text() == "[image cat.png 24×16]\nWhat is it?"  # the label stays
    path.unlink()
    chat_id = chat.chat_id
    await chat.action_new_chat()
    await chat.open_chat(chat_id)
    await pilot.pause()
    assert not chat.query(HalfcellImage) and chat.query_one(UserTurn).render_text().startswith("[image missing: ")


async def test_regenerate_resends_the_messages_images(start_app: StartApp, tmp_path: Path) -> None:
    path = picture(tmp_path)
    engine = FakeEngine(vision=True)
    pilot = await start_app(engine)
    chat = await ready_chat(pilot)
    chat.attached.append(read_attachment(str(path)))
    await send(pilot, chat, "What is it?")
    before = chat.reply_id
    await pilot.press("f12")
    await wait_for(pilot, lambda: chat.reply_id > before and not chat.generating)
    sent = [(str(path), file_sha256(path))]
    assert engine.images == [sent, sent] and engine.prompts[-1][0] == "What is it?"
    (stored,) = [m for m in chat.host.history.messages(chat.chat_id) if m.role == "user"]
    assert [(i.path, i.sha256) for i in stored.images] == sent


def test_a_terminal_that_does_not_answer_the_size_query_sees_no_traceback() -> None:
    """textual-image logs a warning with a traceback when the terminal does not
    answer its cell-size query; with no logging set up (as in the app), Python
    would print it on the terminal just before the app starts."""
    import subprocess
    import sys

    script = (
        "import logging\n"
        "from racer_tui.widgets.chat_image import detect_graphics\n"
        "detect_graphics()\n"
        "try:\n"
        "    raise TimeoutError('Timeout waiting for data')\n"
        "except TimeoutError as exc:\n"
        "    logging.getLogger('textual_image._terminal').warning('Failed to get cell size', exc_info=exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Failed to get cell size" not in done.stderr
