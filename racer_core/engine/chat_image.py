"""An image attached to a chat message, without torch: read and checked once,
named by its path and its content hash (sha256).

The chat UI validates attachments with this before anything is sent, and the
engine's multimodal prompts take the same objects (racer_core.engine.multimodal)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from racer_core.common.errors import InputError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".tif", ".tiff")


@dataclass(frozen=True)
class ChatImage:
    """An image attached to a message: where it came from, what it holds."""

    path: str
    sha256: str
    pixels: Any = field(compare=False, repr=False)  # a PIL image in RGB


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_image(path: str | Path) -> ChatImage:
    """Read an image file, or raise one clear InputError."""
    from PIL import Image, UnidentifiedImageError

    file = Path(path).expanduser()
    if not file.is_file():
        raise InputError(f"image not found: {file}")
    try:
        data = file.read_bytes()
    except OSError as error:
        raise InputError(f"cannot read {file}: {error.strerror or error}") from None
    try:
        with Image.open(file) as opened:
            pixels = opened.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError) as error:
        raise InputError(f"not a readable image: {file} ({type(error).__name__})") from error
    return ChatImage(str(file), hashlib.sha256(data).hexdigest(), pixels)


def image_from_pixels(pixels: Any, name: str = "<memory>") -> ChatImage:
    """Wrap an in-memory PIL image (tests, generated pictures)."""
    rgb = pixels.convert("RGB")
    return ChatImage(name, hashlib.sha256(rgb.tobytes() + repr(rgb.size).encode()).hexdigest(), rgb)


_INLINE = re.compile(r"<image>(.*?)</image>", re.DOTALL)


def split_inline_images(text: str) -> tuple[str, list[str]]:
    """The original CLI's `<image>PATH</image>` syntax: (the text without the
    tags, the paths in order). An empty tag is refused."""
    paths = [m.strip() for m in _INLINE.findall(text)]
    if any(not p for p in paths):
        raise InputError("an <image></image> tag has no path in it")
    return _INLINE.sub("", text).strip(), paths
