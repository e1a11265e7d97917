"""Sidebar of past chats, newest first, each with when it last changed (chats
that start alike share a title, not a date)."""

from __future__ import annotations

import time

from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from racer_tui.history import ChatSummary


def chat_date(updated: float, now: float | None = None) -> str:
    """When a chat last changed, as short as tells it apart: the time today,
    the day this year, else the date."""
    when, today = time.localtime(updated), time.localtime(time.time() if now is None else now)
    if when[:3] == today[:3]:
        return time.strftime("today %H:%M", when)
    if when.tm_year == today.tm_year:
        return time.strftime("%b %d %H:%M", when)
    return time.strftime("%Y-%m-%d", when)


def chat_label(chat: ChatSummary) -> Text:
    """A chat's entry: its title (never markup), its date dim below it."""
    return Text.assemble(chat.title or "(untitled)", "\n", (chat_date(chat.updated), "dim"))


class ChatList(OptionList):
    BINDINGS = [
        Binding("delete", "delete_chat", "Delete chat"),
        Binding("e", "export_chat", "Export"),
        Binding("r", "rename_chat", "Rename"),
    ]

    class Delete(Message):
        def __init__(self, chat_id: int) -> None:
            super().__init__()
            self.chat_id = chat_id

    class Export(Message):
        def __init__(self, chat_id: int) -> None:
            super().__init__()
            self.chat_id = chat_id

    class Rename(Message):
        def __init__(self, chat_id: int) -> None:
            super().__init__()
            self.chat_id = chat_id

    def show_chats(self, chats: list[ChatSummary], current: int | None) -> None:
        self.clear_options()
        self.add_options([Option(chat_label(c), id=str(c.id)) for c in chats])
        ids = [c.id for c in chats]
        self.highlighted = ids.index(current) if current in ids else None

    def highlighted_chat(self) -> int | None:
        if self.highlighted is None:
            return None
        option = self.get_option_at_index(self.highlighted)
        return int(option.id) if option.id else None

    def action_delete_chat(self) -> None:
        chat_id = self.highlighted_chat()
        if chat_id is not None:
            self.post_message(self.Delete(chat_id))

    def action_export_chat(self) -> None:
        chat_id = self.highlighted_chat()
        if chat_id is not None:
            self.post_message(self.Export(chat_id))

    def action_rename_chat(self) -> None:
        chat_id = self.highlighted_chat()
        if chat_id is not None:
            self.post_message(self.Rename(chat_id))
