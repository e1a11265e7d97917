"""Small dialogs of the chat: one line of text (rename, save, load) and the
chat search."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from racer_tui.history import ChatMatch

SNIPPET_WIDTH = 76  # the search dialog's width, less its frame and indent


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
            yield Static(Text(self.question))
            yield Input(self.value, placeholder=self.placeholder, id="line")

    def on_mount(self) -> None:
        if self.app.is_headless:
            self.query_one(Input).cursor_blink = False  # deterministic snapshots

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if text:
            self.dismiss(text)


def snippet(message: str, query: str, width: int = SNIPPET_WIDTH) -> Text:
    """One line of `message` around the first place it has `query` (any case),
    the words highlighted; the message's start when the query is empty."""
    line = " ".join(message.split())
    at = line.casefold().find(query.casefold()) if query else -1
    start = 0 if at < 0 else max(0, min(at - width // 3, len(line) - width))
    shown = line[start : start + width]
    text = Text(("…" if start else "") + shown + ("…" if start + width < len(line) else ""), style="dim")
    if at >= 0:
        offset = at - start + (1 if start else 0)
        text.stylize("bold reverse", offset, offset + len(query))
    return text


def search_result(match: ChatMatch, query: str) -> Text:
    """A found chat: its title and when it was last changed, then where the
    words are (chats that start alike share a title, not the rest)."""
    chat = match.chat
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(chat.updated))
    result = Text.assemble((chat.title or "(untitled)", "bold"), ("  " + when, "dim"))
    if query and match.message:
        result.append("\n  ")
        result.append_text(snippet(match.message, query))
    return result


class SearchScreen(ModalScreen[int | None]):
    """Type to find chats by title or content; Enter (or a click) opens one."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel"), Binding("down", "to_results", show=False)]
    DEFAULT_CSS = "#search-results { height: auto; max-height: 16; }"

    def __init__(self, search: Callable[[str], list[ChatMatch]]) -> None:
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
        words = query.strip()
        found = self.search(words)
        results.add_options(Option(search_result(match, words), id=str(match.chat.id)) for match in found)
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
