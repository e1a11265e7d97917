"""Small dialogs of the chat: one line of text (rename, save, load) and the
chat search."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from racer_tui.history import ChatSummary


class LineScreen(ModalScreen[str | None]):
    """Ask for one line; Enter answers it (blank answers are refused), Escape cancels."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, question: str, value: str = "", placeholder: str = "") -> None:
        super().__init__()
        self.question = question
        self.value = value
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question)
            yield Input(self.value, placeholder=self.placeholder, id="line")

    def on_mount(self) -> None:
        if self.app.is_headless:
            self.query_one(Input).cursor_blink = False  # deterministic snapshots

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if text:
            self.dismiss(text)


class SearchScreen(ModalScreen[int | None]):
    """Type to find chats by title or content; Enter (or a click) opens one."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel"), Binding("down", "to_results", show=False)]
    DEFAULT_CSS = "#search-results { height: auto; max-height: 16; }"

    def __init__(self, search: Callable[[str], list[ChatSummary]]) -> None:
        super().__init__()
        self.search = search

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide-dialog"):
            yield Static("Search chats (title or any message)")
            yield Input(placeholder="words to find", id="search-query")
            yield OptionList(id="search-results")

    def on_mount(self) -> None:
        if self.app.is_headless:
            self.query_one(Input).cursor_blink = False
        self.show("")

    def show(self, query: str) -> None:
        results = self.query_one(OptionList)
        results.clear_options()
        found = self.search(query.strip())
        results.add_options(Option(Text(chat.title or "(untitled)"), id=str(chat.id)) for chat in found)
        if not found:
            results.add_option(Option("no chat matches", disabled=True))
        results.highlighted = 0 if found else None

    def on_input_changed(self, event: Input.Changed) -> None:
        self.show(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        results = self.query_one(OptionList)
        if results.highlighted is not None:
            option = results.get_option_at_index(results.highlighted)
            if option.id:
                self.dismiss(int(option.id))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id:
            self.dismiss(int(event.option.id))

    def action_to_results(self) -> None:
        self.query_one(OptionList).focus()
