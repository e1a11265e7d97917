"""The attach-an-image prompt: a path with completion, checked before it is taken."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.suggester import Suggester
from textual.widgets import Input, Static

from racer_core.common.errors import InputError
from racer_core.engine.chat_image import ChatImage
from racer_tui.chat.attachments import complete_path, read_attachment


class PathSuggester(Suggester):
    """Suggests the rest of a folder or image file name as the path is typed."""

    def __init__(self) -> None:
        super().__init__(use_cache=False, case_sensitive=True)  # the folder may change meanwhile

    async def get_suggestion(self, value: str) -> str | None:
        return complete_path(value)


class PathInput(Input):
    """Tab takes the suggested completion, as → at the end of the line does."""

    BINDINGS = [Binding("tab", "complete", "Complete the path", show=False)]

    def action_complete(self) -> None:
        if self._suggestion and self._suggestion != self.value:
            self.value = self._suggestion
            self.cursor_position = len(self.value)


class AttachImageScreen(ModalScreen[ChatImage | None]):
    """Enter attaches the image at the typed path (a notice says why it cannot);
    Escape cancels."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide-dialog"):
            yield Static("Attach an image to the next message")
            yield PathInput(placeholder="path/to/picture.png", suggester=PathSuggester(), id="image-path")
            yield Static("Tab or → completes the path · Enter attaches · Esc cancels", classes="dialog-hint")

    def on_mount(self) -> None:
        if self.app.is_headless:
            self.query_one(PathInput).cursor_blink = False  # deterministic snapshots

    def on_input_submitted(self, event: Input.Submitted) -> None:
        path = event.value.strip()
        if not path:
            self.notify("Type the path of an image, or press Escape.", severity="warning")
            return
        try:
            image = read_attachment(path)
        except InputError as exc:  # the path stays typed, to fix
            self.notify(str(exc), title="Attach image", severity="error")
            return
        self.dismiss(image)
