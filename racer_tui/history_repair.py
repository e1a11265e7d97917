"""Open the chat history so that the app always starts and nothing is lost.

At start the file is checked (`PRAGMA quick_check`). A damaged file is moved
aside with a timestamp, never deleted; every chat that can still be read from
it is copied into a fresh history, and the user gets one notice saying what
was kept. Reading goes row by row, skipping past unreadable pages, so one bad
page costs only the rows on it. Reading works on a copy whose header is
repaired first (the page count after a truncation, or the whole 100-byte
header when it was overwritten).
"""

from __future__ import annotations

import sqlite3
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from racer_core.common.paths import move_aside as move_file_aside
from racer_tui.history import HistoryError, HistoryStore, NewerSchemaError, decode_message, title_for

MAX_SKIP = 20_000  # ids tried past an unreadable page before a table scan gives up
PAGE_SIZES = (4096, 1024, 2048, 8192, 16384, 32768, 65536, 512)  # 4096: SQLite's default
COMPANIONS = ("-journal", "-wal", "-shm")  # SQLite's side files travel with the database
SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass
class Salvage:
    chats: int = 0
    messages: int = 0
    untitled: int = 0  # chats whose own row was lost: titled from their first message
    skipped: list[str] = field(default_factory=list)  # rows that were readable but unusable


def check(path: Path) -> str | None:
    """Why the history at `path` is damaged (one line), or None when it is sound or absent."""
    if not path.exists():
        return None
    try:
        db = sqlite3.connect(path)
    except sqlite3.DatabaseError as exc:
        return str(exc)
    try:
        rows = db.execute("PRAGMA quick_check").fetchall()
    except sqlite3.DatabaseError as exc:
        return str(exc)
    finally:
        db.close()
    problems = [str(r[0]) for r in rows if r[0] != "ok"]
    return problems[0] if problems else None


def open_history(path: Path) -> tuple[HistoryStore, str | None]:
    """The history store for `path`, and a notice for the user when it had to be
    repaired. Whatever happens the app gets a store: in memory when the folder
    cannot be written, with a notice saying so."""
    try:
        return _open_or_repair(path)
    except (OSError, HistoryError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return HistoryStore(":memory:"), (
            f"The chat history at {path} cannot be used ({reason}); the chats of this session are not saved."
        )


def _open_or_repair(path: Path) -> tuple[HistoryStore, str | None]:
    problem = check(path)
    if problem is None:
        try:
            return HistoryStore(path), None
        except NewerSchemaError as exc:
            return HistoryStore(":memory:"), (
                f"{exc}: it is left as it is, and the chats of this session are not saved. "
                "Use a newer racer-tui to open it."
            )
        except HistoryError as exc:
            problem = str(exc)
    moved = move_aside(path)
    store = HistoryStore(path)
    return store, repair_notice(problem, moved, salvage(moved, store))


def repair_notice(problem: str, moved: Path, found: Salvage) -> str:
    head = f"The chat history was damaged ({problem}). It was moved to {moved.name} in the same folder"
    if not found.chats:
        return head + "; no chat could be read from it, so the history starts empty."
    kept = f"{found.chats} chat{'s' if found.chats != 1 else ''} ({found.messages} turns) were salvaged"
    extra = f"; {found.untitled} lost their title and are named after their first message" if found.untitled else ""
    return f"{head}, and {kept} into a fresh history{extra}."


def move_aside(path: Path) -> Path:
    """Move the damaged file aside the way every damaged user file is
    (`racer_core.common.paths.move_aside`), taking SQLite's side files along."""
    target = move_file_aside(path)
    for suffix in COMPANIONS:
        side = path.with_name(path.name + suffix)
        if side.exists():
            side.rename(target.with_name(target.name + suffix))
    return target


def salvage(source: Path, store: HistoryStore) -> Salvage:
    """Copy every readable chat of the damaged file `source` into `store`."""
    found = Salvage()
    with _readable(source) as db:
        if db is None:
            return found
        chats = {row[0]: row for row in scan(db, "chats", "id, title, system_prompt, created, updated")}
        turns: dict[int, list[tuple]] = {}
        # Attached images came with schema 3; an older file has no such column.
        images = ", images" if _has_column(db, "messages", "images") else ""
        for row in scan(db, "messages", f"id, chat_id, role, content, runs, stats{images}"):
            turn = _usable_turn(row)
            if turn is None:
                found.skipped.append(f"turn {row[0]}")
            else:
                turns.setdefault(turn[1], []).append(turn)
    for chat_id in sorted(set(chats) | set(turns)):
        if not isinstance(chat_id, int):
            continue
        messages = turns.get(chat_id, [])
        chat = chats.get(chat_id)
        if chat is None:
            first = next((m[3] for m in messages if m[2] == "user"), "")
            chat = (chat_id, title_for(first) or f"recovered chat {chat_id}", "", 0.0, 0.0)
            found.untitled += 1
        store.insert_salvaged(_clean_chat(chat), messages)
        found.chats += 1
        found.messages += len(messages)
    return found


def _usable_turn(row: tuple) -> tuple | None:
    """A stored turn as it can be kept, as (id, chat_id, role, content, runs,
    stats, images): the words even when the colours, the statistics or the
    images are damaged; None when not even the words are there."""
    if not isinstance(row[1], int):
        return None
    if isinstance(row[3], str) and "\x00" in row[3]:
        return None  # SQLite reads the pages past a cut as zeros: these words are gone
    try:
        decode_message(*row[2:])
    except ValueError:
        if row[2] in ("user", "assistant") and isinstance(row[3], str):
            return (*row[:4], None, None, None)
        return None
    return (*row, None) if len(row) == 6 else row


def _has_column(db: sqlite3.Connection, table: str, column: str) -> bool:
    try:
        return any(info[1] == column for info in db.execute(f"PRAGMA table_info({table})"))
    except sqlite3.DatabaseError:
        return False


def _clean_chat(row: tuple) -> tuple:
    chat_id, title, system_prompt, created, updated = row
    number = (int, float)
    return (
        chat_id,
        title if isinstance(title, str) else f"recovered chat {chat_id}",
        system_prompt if isinstance(system_prompt, str) else "",
        created if isinstance(created, number) else 0.0,
        updated if isinstance(updated, number) else 0.0,
    )


def scan(db: sqlite3.Connection, table: str, columns: str) -> Iterator[tuple]:
    """Every readable row of `table` in id order. A read that fails on a damaged
    page resumes at the next id, so the b-tree seek lands past that page."""
    after, misses = 0, 0
    limit = _highest_id(db, table)
    while misses <= MAX_SKIP and (limit is None or after < limit):
        try:
            for row in db.execute(f"SELECT {columns} FROM {table} WHERE id > ? ORDER BY id", (after,)):
                yield row
                after, misses = row[0], 0
            return
        except sqlite3.DatabaseError:
            after += 1
            misses += 1


def _highest_id(db: sqlite3.Connection, table: str) -> int | None:
    """The largest id ever given in `table` (AUTOINCREMENT keeps it), when readable."""
    try:
        row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)).fetchone()
    except sqlite3.DatabaseError:
        return None
    return int(row[0]) if row and isinstance(row[0], int) else None


@contextmanager
def _readable(source: Path) -> Iterator[sqlite3.Connection | None]:
    """A read-only connection to a repaired copy of `source` (the file moved aside
    stays as it was); None when not even its table list can be read."""
    with tempfile.TemporaryDirectory(prefix="racer-history-") as folder:
        db = _open_repaired_copy(source.read_bytes(), Path(folder))
        try:
            yield db
        finally:
            if db is not None:
                db.close()


def _open_read_only(path: Path) -> sqlite3.Connection | None:
    # immutable: read as is, no locks, no journal replay
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError:
        db.close()
        return None
    return db


def _open_repaired_copy(data: bytes, folder: Path) -> sqlite3.Connection | None:
    """The header says how many pages the file has; after a truncation SQLite
    refuses a file shorter than that, so the copy's count is the real one. When
    the header itself is gone, each page size is tried with a rebuilt header:
    page 1's table list starts right after the 100-byte header."""
    if data.startswith(SQLITE_MAGIC):
        raw = int.from_bytes(data[16:18], "big")
        sizes = [65536 if raw == 1 else raw]
    else:
        sizes = list(PAGE_SIZES)
    for page_size in sizes:
        if page_size not in PAGE_SIZES or len(data) < page_size:
            continue
        pages = -(-len(data) // page_size)
        body = data[100:].ljust(pages * page_size - 100, b"\0")  # a cut last page, zero-filled
        if data.startswith(SQLITE_MAGIC):
            header = bytearray(data[:100])
            header[28:32] = pages.to_bytes(4, "big")
        else:
            header = bytearray(sqlite_header(page_size, pages))
        copy = folder / f"copy-{page_size}.sqlite3"
        copy.write_bytes(bytes(header) + body)
        db = _open_read_only(copy)
        if db is not None:
            return db
    return None


def sqlite_header(page_size: int, pages: int) -> bytes:
    """A database header as SQLite writes it for a UTF-8 rollback-journal file
    (https://www.sqlite.org/fileformat.html#the_database_header); the free-page
    list is left empty, which only matters for writing."""
    header = bytearray(100)
    header[0:16] = SQLITE_MAGIC
    struct.pack_into(">H", header, 16, 1 if page_size == 65536 else page_size)
    header[18:24] = bytes([1, 1, 0, 64, 32, 32])
    struct.pack_into(">I", header, 24, 1)  # change counter
    struct.pack_into(">I", header, 28, pages)
    struct.pack_into(">I", header, 40, 1)  # schema cookie
    struct.pack_into(">I", header, 44, 4)  # schema format
    struct.pack_into(">I", header, 56, 1)  # UTF-8
    struct.pack_into(">I", header, 92, 1)  # the page count above is valid for change 1
    struct.pack_into(">I", header, 96, 3_040_001)
    return bytes(header)
