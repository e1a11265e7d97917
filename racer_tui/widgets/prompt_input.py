"""Multi-line prompt: Enter sends, Ctrl+J (or Shift+Enter where the terminal
reports it) inserts a new line."""

from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import TextArea

NEWLINE_KEYS = ("ctrl+j", "shift+enter", "alt+enter")


class PromptInput(TextArea):
    BINDINGS = [
        Binding("enter", "submit", "Send"),
        Binding("ctrl+j", "newline", "New line"),
        Binding("up", "up_or_edit", "Edit the last message (in an empty prompt)", show=False),
    ]

    class EditLast(Message):
        """Up in an empty prompt: the chat puts its last message here to edit."""

    class Submitted(Message):
        def __init__(self, prompt: PromptInput, text: str) -> None:
            super().__init__()
            self.prompt = prompt
            self.text = text

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, soft_wrap=True, show_line_numbers=False, tab_behavior="focus")
        self.placeholder = "Ask something. Enter sends, Ctrl+J adds a line."

    def on_mount(self) -> None:
        if self.app.is_headless:
            self.cursor_blink = False  # deterministic snapshots

    async def _on_key(self, event: events.Key) -> None:
        # TextArea inserts "\n" on Enter itself; take the keys before it does.
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.action_submit()
            return
        if event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            self.action_newline()
            return
        await super()._on_key(event)

    def action_submit(self) -> None:
        self.post_message(self.Submitted(self, self.text))

    def action_up_or_edit(self) -> None:
        if self.text:
            self.action_cursor_up()
        else:
            self.post_message(self.EditLast())

    def action_newline(self) -> None:
        start, end = self.selection
        self.replace("\n", start, end, maintain_selection_offset=False)
