"""What users of chat TUIs and of the original RACER chat expect: regenerate,
edit and resend, remove the last exchange, copy a reply, rename and search
chats, save and load a conversation as JSON, and the original's `!!` commands
typed in the prompt box.

A mixin of ChatScreen: the widget side of these actions. The chat's history
and the engine's conversation change through the screen's ChatSession
(racer_tui/chat/session.py), which keeps them in step; this keeps the view in
step with them. The attributes it uses are declared below; ChatScreen defines
them (no import of the screen: no cycle).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from racer_core.common.config import ConfigError, GenerationConfig
from racer_core.common.errors import InputError
from racer_tui.chat import json_file as chat_file
from racer_tui.chat.attachments import intact_images
from racer_tui.chat.json_mode import JSON_GRAMMAR
from racer_tui.commands import PaletteEntry
from racer_tui.history import ChatMatch, HistoryError, StoredMessage, title_for
from racer_tui.screens.chat_dialogs import LineScreen, SearchScreen
from racer_tui.screens.confirm import ConfirmScreen
from racer_tui.widgets.prompt_input import PromptInput
from racer_tui.widgets.reply_markdown import code_blocks
from racer_tui.widgets.turns import ReplyTurn, UserTurn

if TYPE_CHECKING:
    from textual.containers import VerticalScroll

    from racer_core.common.events import Engine
    from racer_core.engine.chat_image import ChatImage
    from racer_tui.chat.session import ChatSession, TakenBack
    from racer_tui.chat.step_log import StepLog
    from racer_tui.host import Host

# The original chat's commands, typed in the prompt box (F1 lists them).
BANG_COMMANDS: list[tuple[str, str]] = [
    ("!!regen", "Generate the last reply again (F12)"),
    ("!!regen T", "The last reply again, sampled at temperature T (Shift+F12: 0.8)"),
    ("!!remove", "Delete the last message and its reply"),
    ("!!save [PATH]", "Save the chat as JSON (default: the export folder); never replaces a file"),
    ("!!save! PATH", "Save the chat as JSON, replacing PATH"),
    ("!!load PATH", "Open a saved conversation as a new chat"),
    ("!!copy", "Copy the last reply"),
    ("!!copy code", "Copy the last code block of the last reply (F11, or a click on a code block in Markdown)"),
    ("!!json PROMPT", "Send PROMPT; its reply is one JSON object (Settings: JSON mode for every reply)"),
    ("!!reset", "Start a new chat"),
    ("!!exit", "Quit"),
]
BANG_HELP = ", ".join(usage for usage, _ in BANG_COMMANDS)
EDITING = "editing: Enter resends it, Esc keeps the old one"

ACTION_COMMANDS: list[PaletteEntry] = [
    ("Regenerate the last reply", "Generate the last reply again (F12, !!regen)", "screen.regenerate"),
    ("Regenerate with sampling", "The last reply again, sampled at temperature 0.8 (Shift+F12, !!regen T)",
     "screen.regenerate(0.8)"),
    ("Edit the last message", "Edit the last message and resend it (Up in an empty prompt)", "screen.edit_last"),
    ("Remove the last exchange", "Delete the last message and its reply (!!remove)", "screen.remove_last"),
    ("Copy the last reply", "Put the last reply on the clipboard (!!copy)", "screen.copy_reply"),
    ("Copy the last code block", "Put the last reply's last code block on the clipboard (F11, !!copy code)",
     "screen.copy_code"),
    ("Rename chat", "Give the open chat a title (r in the chat list)", "screen.rename_chat"),
    ("Search chats", "Find chats by title or content (Ctrl+F)", "screen.search_chats"),
    ("Save chat as JSON", "Write the open chat in the original RACER chat's format (Ctrl+S, !!save)",
     "screen.save_chat"),
    ("Load chat from JSON", "Open a saved conversation as a new chat (!!load PATH)", "screen.load_chat"),
]


def _taken(path: Path) -> bool:
    """A file is there that a save would replace (a folder is refused by the write itself)."""
    return path.exists() and not path.is_dir()


class ChatActions:
    if TYPE_CHECKING:  # what the mixin uses of ChatScreen (Textual's Screen gives the rest)
        host: Host
        steps: StepLog
        _editing: int | None  # the chat whose last message the prompt holds to resend

        @property
        def session(self) -> ChatSession: ...
        @property
        def chat_id(self) -> int | None: ...
        @property
        def conversation_view(self) -> VerticalScroll: ...
        def _busy(self) -> bool: ...
        def _history_failed(self, exc: HistoryError) -> None: ...
        def send(self, engine: Engine, text: str, images: list[ChatImage] | None = None, *,
                 temperature: float | None = None, as_json: bool = False) -> bool: ...
        def refresh_sidebar(self) -> None: ...
        def count_context(self) -> None: ...
        def show_stored_stats(self, stats: dict, reply_id: int | None) -> None: ...
        async def open_chat(self, chat_id: int) -> None: ...
        async def action_new_chat(self) -> None: ...

    # -- the last exchange, in history, engine conversation and view at once ----

    def _ready_engine(self) -> Engine | None:
        """The engine, when a reply could start now; else None and a notice.
        Checked before anything is taken back, so a refused reply loses nothing."""
        engine = self.host.ready_engine()
        if engine is None:
            return None
        if self._busy() or not self.host.claim_engine("chat"):  # each says why
            return None
        self.host.release_engine()  # send() claims it again at once
        return engine

    def _drop_last_exchange(self) -> TakenBack | None:
        """Remove the last user message and the reply after it; return them
        (None, with a notice, when there is none)."""
        try:
            taken = self.session.take_back_last()
        except HistoryError as exc:
            self._history_failed(exc)
            return None
        if taken is None:
            self.notify("There is no message to take back.", severity="warning")
            return None
        self._editing = None
        turns = [w for w in self.conversation_view.children if isinstance(w, UserTurn | ReplyTurn)]
        cut = max((i for i, w in enumerate(turns) if isinstance(w, UserTurn)), default=len(turns))
        for widget in turns[cut:]:
            if isinstance(widget, ReplyTurn) and widget.reply_id is not None:
                self.steps.forget(widget.reply_id)  # its draft trees go with it
            widget.remove()
        # The chart and status line show the reply that is now the last one.
        replies = [w for w in turns[:cut] if isinstance(w, ReplyTurn)]
        stats = next((m.stats for m in reversed(taken.kept) if m.role == "assistant"), {})
        self.show_stored_stats(stats, replies[-1].reply_id if replies else None)
        self.count_context()  # the chat is shorter now
        self.refresh_sidebar()
        return taken

    def _images_again(self, message: StoredMessage) -> list[ChatImage]:
        """A message's images read again to resend it; those gone or changed are
        left out, with a notice."""
        images = intact_images(message.images)
        if len(images) < len(message.images):
            self.notify(f"{len(message.images) - len(images)} of the message's images are missing or changed "
                        "since sent: resent without them.", severity="warning")
        return images

    def action_regenerate(self, temperature: float | None = None) -> None:
        """The last reply again; at `temperature` instead of the settings' (sampled: another reply)."""
        engine = self._ready_engine()
        if engine is None:
            return
        taken = self._drop_last_exchange()
        if taken is None:
            return
        message = taken.message
        # a !!json reply comes again as JSON (stored as its grammar's kind)
        as_json = taken.reply_stats.get("grammar") == JSON_GRAMMAR.kind
        sent = self.send(engine, message.content, self._images_again(message), temperature=temperature,
                         as_json=as_json)
        if not sent and not self._prompt().text.strip():
            self._prompt().text = message.content  # the message stays, ready to send again

    def action_edit_last(self) -> None:
        """Put the last message in the prompt; it replaces the last exchange
        only when sent, so nothing is lost if the edit is dropped."""
        if self._busy():
            return
        prompt = self._prompt()
        if prompt.text.strip():
            self.notify("The prompt is not empty: send or clear it first.", severity="warning")
            return
        users = list(self.conversation_view.query(UserTurn))
        if self.chat_id is None or not users:
            self.notify("There is no message to edit.", severity="warning")
            return
        self._editing = self.chat_id
        users[-1].border_subtitle = EDITING
        prompt.text = users[-1].message
        prompt.move_cursor(prompt.document.end)
        prompt.focus()

    def cancel_edit(self) -> bool:
        """Escape while editing: the old exchange stays; the prompt's text too."""
        if self._editing is None:
            return False
        self._editing = None
        for turn in self.conversation_view.query(UserTurn):
            turn.border_subtitle = ""
        self.notify("The last message stays as it was; Enter now sends the prompt as a new message.")
        return True

    def resend_edited(self, text: str, as_json: bool = False) -> bool:
        """Submit while editing: replace the last exchange by `text` and its reply (`as_json`: `!!json` was typed)."""
        engine = self._ready_engine()
        if engine is None:
            return False
        taken = self._drop_last_exchange()
        if taken is None:
            return False
        return self.send(engine, text, self._images_again(taken.message), as_json=as_json)  # an edit changes the words

    def action_remove_last(self) -> None:
        if not self._busy() and self._drop_last_exchange() is not None:
            self.notify("Removed the last exchange.")

    def action_copy_reply(self) -> None:
        replies = [t for t in self.conversation_view.query(ReplyTurn) if t.complete]
        if not replies:
            self.notify("There is no reply to copy yet.", severity="warning")
            return
        self.app.copy_to_clipboard(replies[-1].content)
        self.notify(f"Copied the last reply ({len(replies[-1].content)} characters).")

    def action_copy_code(self) -> None:
        """The last code block of the last finished reply that has one."""
        replies = [t for t in self.conversation_view.query(ReplyTurn) if t.complete]
        blocks = next((found for t in reversed(replies) if (found := code_blocks(t.content))), [])
        if not blocks:
            self.notify("There is no code block in the replies yet.", severity="warning")
            return
        self.app.copy_to_clipboard(blocks[-1])
        self.notify(f"Copied the last code block ({len(blocks[-1].splitlines())} lines).")

    def _prompt(self) -> PromptInput:
        prompt = self.query_one(PromptInput)
        assert isinstance(prompt, PromptInput)
        return prompt

    # -- chats --------------------------------------------------------------

    def action_rename_chat(self) -> None:
        if self.chat_id is None:
            self.notify("This chat is not saved yet: send a message first.", severity="warning")
            return
        self.rename_chat(self.chat_id)

    def rename_chat(self, chat_id: int) -> None:
        def renamed(title: str | None) -> None:
            if not title:
                return
            try:
                self.host.history.rename_chat(chat_id, title_for(title, 80))
            except HistoryError as exc:
                self._history_failed(exc)
            self.refresh_sidebar()

        try:
            current = self.host.history.title(chat_id)
        except HistoryError as exc:
            self._history_failed(exc)
            return
        self.app.push_screen(LineScreen("Rename the chat", current), renamed)

    def action_search_chats(self) -> None:
        def chosen(chat_id: int | None) -> None:
            if chat_id is not None:
                self.run_worker(self.open_chat(chat_id), exclusive=True, group="open")

        def search(query: str) -> list[ChatMatch]:
            try:
                return self.host.history.search_chats(query)
            except HistoryError as exc:
                self._history_failed(exc)
                return []

        self.app.push_screen(SearchScreen(search), chosen)

    # -- JSON files -----------------------------------------------------------

    def _default_json(self) -> str:
        return self.host.show_path(self.host.export_dir / f"chat-{self.chat_id}.json")

    def action_save_chat(self) -> None:
        if self.chat_id is None:
            self.notify("Nothing to save yet.", severity="warning")
            return

        def chosen(name: str | None) -> None:
            if not name:
                return
            path = chat_file.json_path(name)
            if not _taken(path):
                self.save_chat(name)
                return

            def replace(yes: bool | None) -> None:
                if yes:
                    self.save_chat(name, overwrite=True)

            self.app.push_screen(ConfirmScreen(f"{path} exists. Replace it?", yes="Replace"), replace)

        self.app.push_screen(LineScreen("Save the chat as JSON to", self._default_json()), chosen)

    def save_chat(self, name: str | None = None, *, overwrite: bool = False) -> bool:
        """Write the open chat to NAME (".json" added without an extension), by
        default to the export folder; an existing file only with `overwrite`,
        and only into a folder that exists (the export folder is made). False,
        with a notice, when it did not write."""
        if self.chat_id is None:
            self.notify("Nothing to save yet.", severity="warning")
            return False
        path = chat_file.json_path(name or self._default_json())
        if _taken(path) and not overwrite:
            self.notify(f"{path} exists: !!save! {name or path} replaces it.", title="Save", severity="warning",
                        timeout=10)
            return False
        history = self.host.history
        try:
            if path.parent == self.host.export_dir:  # the app's own folder is made when first used
                path.parent.mkdir(parents=True, exist_ok=True)
            elif not path.parent.is_dir():
                self.notify(f"Cannot write {path}: the folder {path.parent} does not exist.", title="Save",
                            severity="error", timeout=10)
                return False
            chat = chat_file.ChatFile(history.system_prompt(self.chat_id), history.messages(self.chat_id))
            chat_file.save(chat, path)
        except HistoryError as exc:
            self._history_failed(exc)
            return False
        except OSError as exc:
            self.notify(f"Cannot write {path}: {exc.strerror or exc}", title="Save", severity="error", timeout=10)
            return False
        self.notify(f"Saved {len(chat.messages)} messages to {path}", title="Save", timeout=10)
        return True

    def action_load_chat(self) -> None:
        def chosen(name: str | None) -> None:
            if name:
                self.run_worker(self.load_chat(name), exclusive=True, group="open")

        self.app.push_screen(LineScreen("Load a conversation from JSON", placeholder="path/to/chat.json"), chosen)

    async def load_chat(self, name: str) -> bool:
        """Open the conversation in the file NAME as a new chat; the open chat
        stays in the history. False, with a notice, when it could not."""
        if self._busy():
            return False
        path = chat_file.find(name)
        try:
            loaded = chat_file.load(path)
        except InputError as exc:
            self.notify(str(exc), title="Load", severity="error", timeout=10)
            return False
        history = self.host.history
        first = next((m.content for m in loaded.messages if m.role == "user"), path.stem)
        try:
            chat_id = history.create_chat(title_for(first), loaded.system_prompt)
            for message in loaded.messages:
                history.add_message(chat_id, message)
        except HistoryError as exc:
            self._history_failed(exc)
            return False
        await self.open_chat(chat_id)
        self.notify(f"Loaded {len(loaded.messages)} messages from {path}", title="Load")
        return True

    # -- the original chat's commands ----------------------------------------------

    async def run_bang(self, text: str) -> bool:
        """One of the original chat's commands; False (with a notice) when it
        did not run, so the prompt keeps the line to fix."""
        command, _, argument = text.partition(" ")
        argument = argument.strip()
        if command in ("!!save", "!!save!"):
            return self.save_chat(argument or None, overwrite=command == "!!save!")
        if command == "!!load":
            if not argument:
                self.notify("usage: !!load PATH (PATH.json is tried when PATH does not exist)", severity="warning")
                return False
            return await self.load_chat(argument)
        if command == "!!copy" and argument == "code":
            self.action_copy_code()
            return True
        if command == "!!regen" and argument:
            try:
                temperature = GenerationConfig.parse_field("temperature", argument)
            except ConfigError as exc:
                self.notify(f"!!regen T: {exc}", severity="warning")
                return False
            self.action_regenerate(temperature)
            return True
        if argument:
            self.notify(f"{command} takes no argument.", severity="warning")
            return False
        if command == "!!regen":
            self.action_regenerate()
        elif command == "!!remove":
            self.action_remove_last()
        elif command == "!!copy":
            self.action_copy_reply()
        elif command == "!!reset":
            await self.action_new_chat()
        elif command == "!!exit":
            self.app.exit()
        else:
            self.notify(f"Unknown command {command}; the commands are {BANG_HELP}.", severity="warning")
            return False
        return True
