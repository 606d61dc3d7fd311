"""The chat database moved, replaced or deleted under the running app
(issue 19): no write goes to another file or to a new empty one; changes
wait (readable, journaled, counted as unsaved), and land when the file is
back."""

from __future__ import annotations

import os

from app.store import ChatStore
from app.store.writer import MOVED
from tests.test_db_writes import on_disk

FAST = (0.01, 0.05)  # retry pauses: the writer notices the file is back at once


def test_a_database_moved_away_gets_nothing_written_in_its_place(tmp_path):
    db, away = tmp_path / "t.db", tmp_path / "moved.db"
    store = ChatStore(db, retry=FAST)
    chat = store.create_chat("first")
    store.add_message(chat.id, "user", "one")
    os.rename(db, away)
    second = store.add_message(chat.id, "user", "two")
    store.update_chat(chat.id, title="renamed")
    assert not db.exists()  # no new empty database at the old path
    assert store.pending == 2 and store.pending_reason == MOVED
    assert [m.content for m in store.messages(chat.id)] == ["one", "two"]  # readable
    assert store.journal_path.exists()
    os.rename(away, db)  # the user puts it back: the waiting changes land
    assert store.wait_until_saved(10)
    assert on_disk(db, f"SELECT content FROM messages WHERE id = {second}") == [("two",)]
    assert on_disk(db, "SELECT title FROM chats") == [("renamed",)]
    assert store.close() == 0


def test_a_database_replaced_by_another_file_or_a_folder_is_never_written(tmp_path):
    db = tmp_path / "t.db"
    store = ChatStore(db, retry=FAST)
    chat = store.create_chat("mine")
    os.rename(db, tmp_path / "old.db")
    other = ChatStore(db)  # someone else's database now at that path
    other.create_chat("theirs")
    other.close()
    store.add_message(chat.id, "user", "not for them")
    assert store.pending == 1 and store.pending_reason == MOVED
    assert on_disk(db, "SELECT count(*) FROM messages") == [(0,)]
    os.rename(db, tmp_path / "theirs.db")
    db.mkdir()  # and then a folder
    store.add_message(chat.id, "user", "still waiting")
    assert store.pending == 2
    left = store.close(timeout=0.2)
    assert left == 2  # reported as not saved, and kept for the next start
    assert store.journal_path.exists()
