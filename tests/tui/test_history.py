"""The chat history: schema upgrades, and every kind of damage the app must
survive without losing what can still be read."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from racer_core.common.events import Source
from racer_tui.history import (
    SCHEMA_VERSION,
    UPGRADES,
    HistoryError,
    HistoryStore,
    StoredImage,
    StoredMessage,
    schema_version,
)
from racer_tui.history_repair import check, open_history, sqlite_header

# The schema as it was before versioning, written out here so the upgrade test
# keeps starting from it whatever history.py becomes.
SCHEMA_BEFORE_VERSIONS = """
CREATE TABLE IF NOT EXISTS chats (
    id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL, system_prompt TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    role TEXT NOT NULL, content TEXT NOT NULL, runs TEXT, stats TEXT);
CREATE INDEX IF NOT EXISTS messages_chat ON messages(chat_id, id);
"""

RUNS = [(Source.RETRIEVAL, "Hello "), (Source.MODEL, "there")]


def fill(path: Path, chats: int, words: int = 3) -> dict[int, list[StoredMessage]]:
    """A history of `chats` chats of two turns; each turn's text names its chat."""
    store = HistoryStore(path)
    made = {}
    for n in range(chats):
        chat_id = store.create_chat(f"chat {n}", "be brief" if n % 2 else "")
        body = " ".join(f"chat-{n}-word-{i}" for i in range(words))
        turns = [
            StoredMessage("user", f"question of chat {n}: {body}"),
            StoredMessage("assistant", f"answer of chat {n}", RUNS, {"tokens": 2, "steps": 1}),
        ]
        for turn in turns:
            store.add_message(chat_id, turn)
        made[chat_id] = turns
    store.close()
    return made


def read_all(store: HistoryStore) -> dict[int, list[StoredMessage]]:
    return {c.id: store.messages(c.id) for c in store.list_chats()}


def moved_files(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".damaged-*"))


# -- schema versions ---------------------------------------------------------


def test_a_new_history_has_the_current_schema_version(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h.sqlite3")
    assert schema_version(store._db) == SCHEMA_VERSION == len(UPGRADES) >= 2
    store.close()


def test_todays_unversioned_history_is_upgraded_with_its_chats(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(SCHEMA_BEFORE_VERSIONS)
    db.execute("INSERT INTO chats VALUES (7, 'old chat', 'sys', 1.0, 2.0)")
    db.execute("INSERT INTO messages VALUES (3, 7, 'user', 'hi', NULL, NULL)")
    db.execute("INSERT INTO messages VALUES (4, 7, 'assistant', 'yo', '[[1, \"yo\"]]', '{\"steps\": 1}')")
    db.commit()
    assert schema_version(db) == 0
    db.close()

    store = HistoryStore(path)
    assert schema_version(store._db) == SCHEMA_VERSION
    indexes = {r[0] for r in store._db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "chats_updated" in indexes
    assert [(c.id, c.title) for c in store.list_chats()] == [(7, "old chat")]
    assert store.messages(7) == [
        StoredMessage("user", "hi"),
        StoredMessage("assistant", "yo", [(Source.RETRIEVAL, "yo")], {"steps": 1}),
    ]
    store.close()


@pytest.mark.parametrize("version", range(SCHEMA_VERSION + 1))
def test_upgrades_run_in_order_from_every_version(tmp_path: Path, version: int) -> None:
    path = tmp_path / "h.sqlite3"
    db = sqlite3.connect(path)
    for step in range(version):
        db.executescript(UPGRADES[step])
    db.execute(f"PRAGMA user_version = {version}")
    if version:
        db.execute("INSERT INTO chats (title, created, updated) VALUES ('kept', 1, 1)")
    db.commit()
    db.close()
    store = HistoryStore(path)
    assert schema_version(store._db) == SCHEMA_VERSION
    assert [c.title for c in store.list_chats()] == (["kept"] if version else [])
    store.create_chat("new")  # the upgraded file works
    store.close()


def test_a_newer_schema_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    fill(path, 1)
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    db.close()
    before = path.read_bytes()
    with pytest.raises(HistoryError, match="newer"):
        HistoryStore(path)
    store, notice = open_history(path)
    assert notice and "newer" in notice and "not saved" in notice
    store.create_chat("this session only")
    store.close()
    assert path.read_bytes() == before and not moved_files(path)


# -- damage at start -----------------------------------------------------------


def test_a_sound_history_opens_without_a_notice(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    made = fill(path, 3)
    assert check(path) is None
    store, notice = open_history(path)
    assert notice is None and read_all(store) == made
    store.close()


def test_overwritten_header_keeps_every_chat(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    made = fill(path, 4)
    damaged = b"\xde\xad" * 50 + path.read_bytes()[100:]
    path.write_bytes(damaged)
    assert check(path) is not None

    store, notice = open_history(path)
    assert read_all(store) == made  # the rebuilt header made every page readable
    assert notice is not None and "4 chats" in notice and "8 turns" in notice
    (aside,) = moved_files(path)
    assert aside.name in notice and aside.read_bytes() == damaged  # kept as it was
    store.create_chat("a new one")  # the fresh history works
    store.close()
    assert check(path) is None


def test_truncated_file_keeps_the_chats_before_the_cut(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    made = fill(path, 40, words=60)  # long turns: the chats spread over many pages
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert check(path) is not None

    store, notice = open_history(path)
    salvaged = read_all(store)
    kept = sum(len(t) for t in salvaged.values())
    assert 0 < kept < sum(len(t) for t in made.values())
    assert salvaged[1] == made[1]  # the first chat was written first, before the cut
    for chat_id, turns in salvaged.items():  # what is kept is exactly what was written, in order
        written = iter(made[chat_id])
        assert all(turn in written for turn in turns)
    assert notice is not None and f"{len(salvaged)} chats ({kept} turns)" in notice
    (aside,) = moved_files(path)
    assert aside.stat().st_size == len(data) // 2
    store.close()


def test_one_bad_page_costs_only_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    made = fill(path, 40, words=60)
    data = bytearray(path.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    at = data.index(b"chat-20-word-30")  # a page of chat 20's question
    page = at // page_size
    data[page * page_size : (page + 1) * page_size] = b"\x55" * page_size
    path.write_bytes(bytes(data))
    assert check(path) is not None

    store, notice = open_history(path)
    salvaged = read_all(store)
    assert notice is not None and "damaged" in notice
    lost = sum(len(t) for t in made.values()) - sum(len(t) for t in salvaged.values())
    assert 1 <= lost <= 10  # a 4 KiB page holds only a few of these turns
    assert len(salvaged) >= 38
    for chat_id, turns in salvaged.items():
        written = iter(made[chat_id])
        assert all(turn in written for turn in turns)
    assert made[21][0] not in salvaged.get(21, [])  # chat 20 has id 21: its question was on that page
    store.close()


def test_a_file_that_is_not_a_database_at_all(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    path.write_bytes(b"this is not sqlite, just text\n" * 300)
    store, notice = open_history(path)
    assert read_all(store) == {}
    assert notice is not None and "no chat could be read" in notice
    (aside,) = moved_files(path)
    assert aside.read_bytes().startswith(b"this is not sqlite")
    store.close()


def test_rebuilt_header_matches_what_sqlite_writes(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    fill(path, 1)
    data = path.read_bytes()
    rebuilt = sqlite_header(4096, len(data) // 4096)
    assert rebuilt[:24] == data[:24] and rebuilt[28:32] == data[28:32] and rebuilt[44:60] == data[44:60]


# -- damage found later: one bad chat --------------------------------------------


def test_one_unreadable_chat_raises_a_history_error_and_the_rest_reads(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    made = fill(path, 3)
    db = sqlite3.connect(path)
    db.execute("UPDATE messages SET runs = '{oops' WHERE chat_id = 2")
    db.commit()
    db.close()
    store, notice = open_history(path)  # structurally sound: no repair, no notice
    assert notice is None
    with pytest.raises(HistoryError, match="chat 2 cannot be read"):
        store.messages(2)
    assert store.messages(1) == made[1] and store.messages(3) == made[3]
    with pytest.raises(HistoryError):
        store.export_markdown(2)
    store.delete_chat(2)  # and it can still be deleted
    assert [c.id for c in store.list_chats()] == [3, 1]
    store.close()


# -- attached images (schema 3) ---------------------------------------------------


def test_a_version_2_history_gains_attached_images_and_keeps_its_turns(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    db = sqlite3.connect(path)
    for step in range(2):
        db.executescript(UPGRADES[step])
    db.execute("PRAGMA user_version = 2")
    db.execute("INSERT INTO chats VALUES (1, 'before images', '', 1.0, 1.0)")
    db.execute("INSERT INTO messages VALUES (1, 1, 'user', 'hi', NULL, NULL)")
    db.commit()
    db.close()

    store = HistoryStore(path)
    assert schema_version(store._db) == SCHEMA_VERSION >= 3
    assert store.messages(1) == [StoredMessage("user", "hi")]
    pictures = [StoredImage("/pics/cat.png", "ab" * 32), StoredImage("/pics/dog.jpg", "cd" * 32)]
    store.add_message(1, StoredMessage("user", "and these?", images=pictures))
    store.close()
    store = HistoryStore(path)  # read back from the file
    assert store.messages(1)[1].images == pictures
    assert "![image](/pics/cat.png)" in store.export_markdown(1)
    store.close()


def test_damaged_image_records_make_that_chat_unreadable_not_the_app(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    store = HistoryStore(path)
    chat = store.create_chat("pictures")
    store.add_message(chat, StoredMessage("user", "look", images=[StoredImage("/a.png", "00")]))
    store._db.execute("UPDATE messages SET images = '[[1]]'")
    store._db.commit()
    with pytest.raises(HistoryError, match="attached images"):
        store.messages(chat)
    store.close()


def test_salvage_keeps_the_attached_images(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    store = HistoryStore(path)
    chat = store.create_chat("pictures")
    turn = StoredMessage("user", "look", images=[StoredImage("/pics/cat.png", "ab" * 32)])
    store.add_message(chat, turn)
    store.close()
    path.write_bytes(b"\xde\xad" * 50 + path.read_bytes()[100:])

    store, notice = open_history(path)
    assert notice is not None and store.messages(chat) == [turn]
    store.close()
