"""Chat history in SQLite: chats, their turns, and how each reply was drafted.

A reply keeps its text as runs of (source, text) so a reopened chat shows the
accepted draft tokens in colour again, and its step statistics so the chart
and status line can be restored.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from racer_core.events import Source

SCHEMA = """
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

Run = tuple[Source, str]


@dataclass
class StoredMessage:
    role: str  # "user" or "assistant"
    content: str
    runs: list[Run] = field(default_factory=list)  # assistant only
    stats: dict = field(default_factory=dict)  # assistant only: tokens, steps, ...


@dataclass(frozen=True)
class ChatSummary:
    id: int
    title: str
    updated: float


def title_for(text: str, limit: int = 40) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class HistoryStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path)
        self._db.execute("PRAGMA foreign_keys = ON")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        self._db.close()

    def create_chat(self, title: str, system_prompt: str = "") -> int:
        now = time.time()
        with self._db:
            cur = self._db.execute(
                "INSERT INTO chats (title, system_prompt, created, updated) VALUES (?, ?, ?, ?)",
                (title, system_prompt, now, now),
            )
        return int(cur.lastrowid)

    def list_chats(self) -> list[ChatSummary]:
        rows = self._db.execute("SELECT id, title, updated FROM chats ORDER BY updated DESC, id DESC")
        return [ChatSummary(int(r[0]), r[1], float(r[2])) for r in rows]

    def system_prompt(self, chat_id: int) -> str:
        row = self._db.execute("SELECT system_prompt FROM chats WHERE id = ?", (chat_id,)).fetchone()
        return row[0] if row else ""

    def title(self, chat_id: int) -> str:
        row = self._db.execute("SELECT title FROM chats WHERE id = ?", (chat_id,)).fetchone()
        return row[0] if row else ""

    def set_system_prompt(self, chat_id: int, system_prompt: str) -> None:
        with self._db:
            self._db.execute("UPDATE chats SET system_prompt = ? WHERE id = ?", (system_prompt, chat_id))

    def add_message(self, chat_id: int, message: StoredMessage) -> int:
        runs = json.dumps([[int(s), t] for s, t in message.runs]) if message.runs else None
        stats = json.dumps(message.stats) if message.stats else None
        with self._db:
            cur = self._db.execute(
                "INSERT INTO messages (chat_id, role, content, runs, stats) VALUES (?, ?, ?, ?, ?)",
                (chat_id, message.role, message.content, runs, stats),
            )
            self._db.execute("UPDATE chats SET updated = ? WHERE id = ?", (time.time(), chat_id))
        return int(cur.lastrowid)

    def delete_message(self, message_id: int) -> None:
        with self._db:
            self._db.execute("DELETE FROM messages WHERE id = ?", (message_id,))

    def messages(self, chat_id: int) -> list[StoredMessage]:
        rows = self._db.execute(
            "SELECT role, content, runs, stats FROM messages WHERE chat_id = ? ORDER BY id", (chat_id,)
        )
        out = []
        for role, content, runs, stats in rows:
            out.append(
                StoredMessage(
                    role=role,
                    content=content,
                    runs=[(Source(s), t) for s, t in json.loads(runs)] if runs else [],
                    stats=json.loads(stats) if stats else {},
                )
            )
        return out

    def delete_chat(self, chat_id: int) -> None:
        with self._db:
            self._db.execute("DELETE FROM chats WHERE id = ?", (chat_id,))

    def export_markdown(self, chat_id: int) -> str:
        lines = [f"# {self.title(chat_id)}", ""]
        system = self.system_prompt(chat_id)
        if system:
            lines += ["**System:**", "", system, ""]
        for msg in self.messages(chat_id):
            lines += ["**You:**" if msg.role == "user" else "**Assistant:**", "", msg.content, ""]
        return "\n".join(lines).rstrip() + "\n"
