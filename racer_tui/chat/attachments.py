"""Images attached to chat messages, as the chat reads, shows and keeps them.

An attachment is read and checked when attached (an existing, readable image)
and kept in the history as its path plus its content hash, so a reopened chat
can say when the file is gone or no longer the picture that was sent."""

from __future__ import annotations

import os
from pathlib import Path

from racer_core.common.errors import InputError
from racer_core.engine.chat_image import IMAGE_SUFFIXES, ChatImage, file_sha256, load_image
from racer_tui.history import StoredImage

MISSING = "missing"
CHANGED = "changed since sent"


def read_attachment(path: str) -> ChatImage:
    """The image at `path` (made absolute, so the history finds it from anywhere);
    InputError says in one line why it cannot be attached."""
    return load_image(Path(path).expanduser().absolute())


def stored(image: ChatImage) -> StoredImage:
    return StoredImage(image.path, image.sha256)


def image_state(image: StoredImage) -> str:
    """"" when the file still holds the picture that was sent, else MISSING or CHANGED."""
    try:
        digest = file_sha256(image.path)
    except OSError:
        return MISSING
    return "" if not image.sha256 or digest == image.sha256 else CHANGED


def pixel_size(path: str) -> tuple[int, int] | None:
    """Width and height from the file's header, None when it cannot be read."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as opened:
            return opened.size
    except (OSError, UnidentifiedImageError, ValueError):
        return None


def image_label(image: StoredImage, state: str | None = None) -> str:
    """The plain-text stand-in of a picture: `[image cat.png 24×16]`, with what is wrong."""
    state = image_state(image) if state is None else state
    if state == MISSING:
        return f"[image missing: {image.path}]"
    size = pixel_size(image.path)
    name = Path(image.path).name + (f" {size[0]}×{size[1]}" if size else "")
    return f"[image {name} · {CHANGED}]" if state == CHANGED else f"[image {name}]"


def intact_images(images: list[StoredImage]) -> list[ChatImage]:
    """The stored images whose files are still the ones sent, read again for the
    model (a reopened chat); the others are left out, as the chat shows."""
    out = []
    for image in images:
        try:
            loaded = load_image(image.path)
        except InputError:  # gone or unreadable: left out, as the chat shows
            continue
        if not image.sha256 or loaded.sha256 == image.sha256:
            out.append(loaded)
    return out


def complete_path(value: str) -> str | None:
    """Path completion for the attach prompt: `value` extended to the first
    folder or image file it starts (folders end with a separator); None when
    nothing matches."""
    if not value:
        return None
    typed = Path(value).expanduser()
    folder, stem = (typed, "") if value.endswith(os.sep) else (typed.parent, typed.name)
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return None
    for entry in entries:
        if not entry.name.startswith(stem) or (entry.name.startswith(".") and not stem):
            continue
        is_dir = entry.is_dir()
        if entry.name == stem and not is_dir:
            continue  # typed in full: nothing to add
        if is_dir or entry.name.lower().endswith(IMAGE_SUFFIXES):
            return value + entry.name[len(stem):] + (os.sep if is_dir else "")
    return None
