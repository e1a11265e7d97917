"""Sidebar of past chats, newest first."""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from racer_tui.history import ChatSummary


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
        self.add_options([Option(Text(c.title or "(untitled)"), id=str(c.id)) for c in chats])
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
