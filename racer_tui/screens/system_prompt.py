"""Edit the system prompt of the current chat (and the default for new ones)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static, TextArea


class SystemPromptScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel"), Binding("ctrl+s", "save", "Save")]

    def __init__(self, current: str) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide-dialog"):
            yield Static("System prompt", classes="box-title")
            yield Static(
                "Applies to this chat from its next message, and to new chats. Empty: none.",
                classes="hint",
            )
            yield TextArea(self.current, id="system-text", soft_wrap=True)
            with Horizontal(classes="buttons"):
                yield Button("Save", id="save", variant="primary")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        area = self.query_one(TextArea)
        if self.app.is_headless:
            area.cursor_blink = False
        area.focus()

    def action_save(self) -> None:
        self.dismiss(self.query_one(TextArea).text.strip())

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.dismiss(None)
