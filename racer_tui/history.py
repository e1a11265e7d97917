"""Chat history in SQLite: chats, their turns, and how each reply was drafted.

A reply keeps its text as runs of (source, text) so a reopened chat shows the
accepted draft tokens in colour again, and its step statistics so the chart
and status line can be restored.

The schema carries a version (`PRAGMA user_version`) and is brought up to date
by ordered upgrades when opened. Every SQLite or decoding failure surfaces as a
HistoryError with one readable line; checking a file at start and salvaging a
damaged one is history_repair's job.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from racer_core.common.errors import RacerError
from racer_core.common.events import Source

# The schema before it had a version number (user_version 0); upgrade 1 adopts it as is.
SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS chats (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    system_prompt TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    runs TEXT,
    stats TEXT
);
CREATE INDEX IF NOT EXISTS messages_chat ON messages(chat_id, id);
"""

# UPGRADES[i] takes the schema from version i to i + 1, in order; a new file runs them all.
UPGRADES: tuple[str, ...] = (
    SCHEMA_V1,
    # 2: the chat list is read newest first on every change; index that order.
    "CREATE INDEX IF NOT EXISTS chats_updated ON chats(updated DESC, id DESC);",
    # 3: a user message's attached images, as JSON [[path, sha256], ...] (NULL: none).
    "ALTER TABLE messages ADD COLUMN images TEXT;",
)
SCHEMA_VERSION = len(UPGRADES)

ROLES = ("user", "assistant")

Run = tuple[Source, str]


class HistoryError(RacerError):
    """The history file (or one chat in it) cannot be read or written."""


class NewerSchemaError(HistoryError):
    """The file was written by a newer racer-tui: left as it is, never downgraded."""


@dataclass(frozen=True)
class StoredImage:
    """An attached image as the history keeps it: where it was and what it held."""

    path: str
    sha256: str


@dataclass
class StoredMessage:
    role: str  # "user" or "assistant"
    content: str
    runs: list[Run] = field(default_factory=list)  # assistant only
    stats: dict = field(default_factory=dict)  # assistant only: tokens, steps, ...
    images: list[StoredImage] = field(default_factory=list)  # user only: attached, in order


@dataclass(frozen=True)
class ChatSummary:
    id: int
    title: str
    updated: float


@dataclass(frozen=True)
class ChatMatch:
    """A chat found by a search, and the latest of its messages that has the
    words ("" when only the title has them)."""

    chat: ChatSummary
    message: str


def title_for(text: str, limit: int = 40) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def schema_version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def upgrade(db: sqlite3.Connection) -> None:
    """Run the upgrades this file has not had yet, each in its own transaction."""
    version = schema_version(db)
    if version > SCHEMA_VERSION:
        raise NewerSchemaError(
            f"the chat history has schema version {version}, newer than this racer-tui's {SCHEMA_VERSION}"
        )
    for step in range(version, SCHEMA_VERSION):
        # user_version lives in the file header and commits with the upgrade.
        db.executescript(f"BEGIN;\n{UPGRADES[step]}\nPRAGMA user_version = {step + 1};\nCOMMIT;")


def decode_message(role: object, content: object, runs: str | None, stats: str | None,
                   images: str | None = None) -> StoredMessage:
    """One stored row as a message; ValueError says what is wrong with it."""
    if role not in ROLES or not isinstance(content, str):
        raise ValueError(f"a turn with role {role!r} and {type(content).__name__} content")
    try:
        decoded_runs = [(Source(s), str(t)) for s, t in json.loads(runs)] if runs else []
        decoded_stats = json.loads(stats) if stats else {}
    except (ValueError, TypeError) as exc:  # JSONDecodeError is a ValueError; bad shapes are TypeErrors
        raise ValueError(f"the drafting record of a reply is damaged ({exc})") from None
    if not valid_stats(decoded_stats):
        raise ValueError("the statistics of a reply are damaged")
    return StoredMessage(str(role), content, decoded_runs, decoded_stats, decode_images(images))


def encode_message(message: StoredMessage) -> tuple[str | None, str | None, str | None]:
    """A message's runs, statistics and images as stored (JSON; NULL when empty)."""
    runs = json.dumps([[int(s), t] for s, t in message.runs]) if message.runs else None
    stats = json.dumps(message.stats) if message.stats else None
    images = json.dumps([[i.path, i.sha256] for i in message.images]) if message.images else None
    return runs, stats, images


def decode_images(images: str | None) -> list[StoredImage]:
    try:
        pairs = json.loads(images) if images else []
        decoded = [StoredImage(path, sha) for path, sha in pairs]
    except (ValueError, TypeError) as exc:
        raise ValueError(f"the attached images of a message are damaged ({exc})") from None
    if not all(isinstance(i.path, str) and isinstance(i.sha256, str) for i in decoded):
        raise ValueError("the attached images of a message are damaged")
    return decoded


def valid_stats(stats: object) -> bool:
    """The reply statistics the chat reads back have the types it wrote
    (also the check of statistics in a loaded JSON file)."""
    if not isinstance(stats, dict):
        return False
    whole = all(isinstance(stats.get(k, 0), int) for k in ("tokens", "steps"))
    lengths = stats.get("accept_lengths", [])
    return (
        whole
        and isinstance(stats.get("seconds", 0.0), int | float)
        and isinstance(lengths, list)
        and all(isinstance(n, int) for n in lengths)
        and all(isinstance(stats.get(k) or "", str) for k in ("method", "finish_reason"))
    )


class HistoryStore:
    def __init__(self, path: Path | str) -> None:
        """Open (or create) the history at `path` and upgrade its schema; ":memory:"
        keeps it in memory only."""
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path)
        try:
            self._db.execute("PRAGMA foreign_keys = ON")
            upgrade(self._db)
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise HistoryError(f"the chat history cannot be opened: {exc}") from None
        except HistoryError:
            self._db.close()
            raise

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """SQLite failures (a damaged page, a full disk) as one readable line."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"{what}: {exc}") from None

    def create_chat(self, title: str, system_prompt: str = "") -> int:
        now = time.time()
        with self._guard("cannot save the new chat"), self._db:
            cur = self._db.execute(
                "INSERT INTO chats (title, system_prompt, created, updated) VALUES (?, ?, ?, ?)",
                (title, system_prompt, now, now),
            )
        return int(cur.lastrowid)

    def list_chats(self) -> list[ChatSummary]:
        with self._guard("cannot read the list of chats"):
            rows = self._db.execute("SELECT id, title, updated FROM chats ORDER BY updated DESC, id DESC").fetchall()
        return [ChatSummary(int(r[0]), r[1], float(r[2])) for r in rows]

    def system_prompt(self, chat_id: int) -> str:
        with self._guard(f"cannot read chat {chat_id}"):
            row = self._db.execute("SELECT system_prompt FROM chats WHERE id = ?", (chat_id,)).fetchone()
        return row[0] if row else ""

    def title(self, chat_id: int) -> str:
        with self._guard(f"cannot read chat {chat_id}"):
            row = self._db.execute("SELECT title FROM chats WHERE id = ?", (chat_id,)).fetchone()
        return row[0] if row else ""

    def set_system_prompt(self, chat_id: int, system_prompt: str) -> None:
        with self._guard(f"cannot save chat {chat_id}"), self._db:
            self._db.execute("UPDATE chats SET system_prompt = ? WHERE id = ?", (system_prompt, chat_id))

    def add_message(self, chat_id: int, message: StoredMessage) -> int:
        return self.add_messages(chat_id, [message])[0]

    def add_messages(self, chat_id: int, messages: list[StoredMessage]) -> list[int]:
        """Append turns to a chat, all or none; their ids, in order."""
        ids = []
        with self._guard(f"cannot save a turn of chat {chat_id}"), self._db:
            for message in messages:
                cur = self._db.execute(
                    "INSERT INTO messages (chat_id, role, content, runs, stats, images) VALUES (?, ?, ?, ?, ?, ?)",
                    (chat_id, message.role, message.content, *encode_message(message)),
                )
                ids.append(int(cur.lastrowid))
            self._db.execute("UPDATE chats SET updated = ? WHERE id = ?", (time.time(), chat_id))
        return ids

    def update_message(self, message_id: int, message: StoredMessage) -> None:
        """Write a turn again in place (a reply saved as it streams, then finished)."""
        with self._guard("cannot save a reply"), self._db:
            self._db.execute(
                "UPDATE messages SET content = ?, runs = ?, stats = ?, images = ? WHERE id = ?",
                (message.content, *encode_message(message), message_id),
            )
            self._db.execute(
                "UPDATE chats SET updated = ? WHERE id = (SELECT chat_id FROM messages WHERE id = ?)",
                (time.time(), message_id),
            )

    def delete_message(self, message_id: int) -> None:
        with self._guard("cannot delete a turn"), self._db:
            self._db.execute("DELETE FROM messages WHERE id = ?", (message_id,))

    def messages(self, chat_id: int) -> list[StoredMessage]:
        """The turns of a chat, oldest first; HistoryError when any of them cannot be read."""
        with self._guard(f"chat {chat_id} cannot be read"):
            rows = self._db.execute(
                "SELECT role, content, runs, stats, images FROM messages WHERE chat_id = ? ORDER BY id", (chat_id,)
            ).fetchall()
        try:
            return [decode_message(*row) for row in rows]
        except ValueError as exc:
            raise HistoryError(f"chat {chat_id} cannot be read: {exc}") from None

    def rename_chat(self, chat_id: int, title: str) -> None:
        with self._guard(f"cannot rename chat {chat_id}"), self._db:
            self._db.execute("UPDATE chats SET title = ? WHERE id = ?", (title, chat_id))

    def search_chats(self, query: str) -> list[ChatMatch]:
        """Chats whose title or any message contains `query` (any case), latest
        first, each with its latest message that contains it: chats that
        start alike have the same title, and differ further on."""
        pattern = "%" + query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        with self._guard("cannot search the chats"):
            rows = self._db.execute(
                "SELECT id, title, updated, hit FROM (SELECT id, title, updated, "
                "(SELECT content FROM messages WHERE chat_id = chats.id AND content LIKE ?1 ESCAPE '\\' "
                "ORDER BY id DESC LIMIT 1) AS hit FROM chats) "
                "WHERE title LIKE ?1 ESCAPE '\\' OR hit IS NOT NULL ORDER BY updated DESC, id DESC",
                (pattern,),
            ).fetchall()
        return [ChatMatch(ChatSummary(int(r[0]), r[1], float(r[2])), r[3] or "") for r in rows]

    def drop_last_messages(self, chat_id: int, count: int) -> None:
        """Delete the chat's last `count` messages (the last exchange, for regenerate and edit)."""
        with self._guard(f"cannot delete turns of chat {chat_id}"), self._db:
            self._db.execute(
                "DELETE FROM messages WHERE id IN (SELECT id FROM messages WHERE chat_id = ? ORDER BY id DESC LIMIT ?)",
                (chat_id, count),
            )

    def delete_chat(self, chat_id: int) -> None:
        with self._guard(f"cannot delete chat {chat_id}"), self._db:
            self._db.execute("DELETE FROM chats WHERE id = ?", (chat_id,))

    def export_markdown(self, chat_id: int) -> str:
        lines = [f"# {self.title(chat_id)}", ""]
        system = self.system_prompt(chat_id)
        if system:
            lines += ["**System:**", "", system, ""]
        for msg in self.messages(chat_id):
            lines += ["**You:**" if msg.role == "user" else "**Assistant:**", ""]
            lines += [f"![image]({image.path})" for image in msg.images]
            lines += [msg.content, ""]
        return "\n".join(lines).rstrip() + "\n"

    def insert_salvaged(self, chat: tuple, messages: list[tuple]) -> None:
        """Put one chat recovered from a damaged file back, with its ids: used by history_repair."""
        with self._guard("cannot write the salvaged history"), self._db:
            self._db.execute(
                "INSERT INTO chats (id, title, system_prompt, created, updated) VALUES (?, ?, ?, ?, ?)", chat
            )
            self._db.executemany(
                "INSERT INTO messages (id, chat_id, role, content, runs, stats, images) VALUES (?, ?, ?, ?, ?, ?, ?)",
                messages,
            )
