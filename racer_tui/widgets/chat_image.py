"""Pictures in the chat: drawn by textual-image where the terminal has a
graphics protocol (Sixel or Kitty's), else a one-line stand-in such as
`[image cat.png 24×16]`; also headless (tests, snapshots), so those stay
deterministic. The attachment bar lists what the next message will carry."""

from __future__ import annotations

import logging
from typing import Any

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from racer_core.engine.chat_image import ChatImage
from racer_tui.chat.attachments import image_label, image_state
from racer_tui.history import StoredImage

PICTURE_ROWS = 10  # the height of a drawn picture, in terminal rows

_graphics: list[Any] = []  # the widget class found by detect_graphics (None: text only)


def detect_graphics() -> Any:
    """textual-image's widget class when the terminal speaks a graphics protocol,
    else None. textual-image asks the terminal when first imported, which works
    only before Textual takes the terminal: the app calls this before it runs."""
    if not _graphics:
        # A terminal that does not answer textual-image's size query gets its
        # fallback; its warning (with a traceback) must not reach the screen.
        quiet = logging.getLogger("textual_image")
        if not quiet.handlers:
            quiet.addHandler(logging.NullHandler())
            quiet.propagate = False
        try:
            from textual_image.renderable import Image as Renderable
            from textual_image.renderable.sixel import Image as Sixel
            from textual_image.renderable.tgp import Image as Kitty
            from textual_image.widget import Image as Picture
        except Exception:  # noqa: BLE001 - a terminal that answers oddly gets the stand-in
            _graphics.append(None)
        else:
            _graphics.append(Picture if Renderable in (Sixel, Kitty) else None)
    return _graphics[0]


def picture_class(app: Any) -> Any:
    """The widget that draws pictures in this app, None for the text stand-in."""
    return None if app.is_headless else detect_graphics()


class ImageView(Vertical):
    """One attached image of a user's turn: the picture and its label, or the
    label alone (text-only terminals; a file gone or changed since it was sent)."""

    DEFAULT_CSS = f"""
    ImageView {{ height: auto; }}
    ImageView .picture {{ height: {PICTURE_ROWS}; width: auto; }}
    ImageView .image-label {{ color: $text-muted; }}
    """

    def __init__(self, image: StoredImage) -> None:
        super().__init__()
        self.image = image
        self.state = image_state(image)
        self.label = image_label(image, self.state)

    def compose(self) -> ComposeResult:
        picture = picture_class(self.app)
        if picture is not None and not self.state:
            yield picture(self.image.path, classes="picture")
        yield Static(Text(self.label), classes="image-label")


class AttachmentBar(Static):
    """The images the next message will carry, each with a ✕ that removes it."""

    DEFAULT_CSS = """
    AttachmentBar { height: auto; padding: 0 1; color: $text-muted; display: none; }
    AttachmentBar.-shown { display: block; }
    """

    def show(self, images: list[ChatImage]) -> None:
        text = Text("attached: ")
        for index, image in enumerate(images):
            label = image_label(StoredImage(image.path, image.sha256), "")
            text.append(f"{label} ")
            text.append("✕", style=Style.from_meta({"@click": f"screen.detach({index})"}) + Style(bold=True))
            text.append("  ")
        text.append("· F10 adds, ✕ removes" if images else "")
        self.update(text)
        self.set_class(bool(images), "-shown")
