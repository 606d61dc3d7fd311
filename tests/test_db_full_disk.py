"""A full disk (issue 19), made deterministic: the database's writes fail as
SQLite fails on a full disk, and writing the journal beside it fails with
ENOSPC. Waiting changes then go to the second journal in the user's
cache folder, and the next start saves them and says so; when no journal
can be written either, the store says the changes live in memory only."""

from __future__ import annotations

import builtins
import errno
import sqlite3
from pathlib import Path

import pytest

import app.store.journal as journal_module
import app.store.writer as writer_module
from app.store import ChatStore

FAST = (0.01, 0.05)


class FullDisk:
    """run_transaction as on a full disk (for the database file; the
    in-memory copy that answers reads meanwhile still takes them), until `free()`."""

    def __init__(self, monkeypatch):
        self.full = True
        real = writer_module.run_transaction

        def run(db, ops):
            on_disk = db.execute("PRAGMA database_list").fetchone()[2]  # "" in memory
            if self.full and ops and on_disk:
                error = sqlite3.OperationalError("database or disk is full")
                error.sqlite_errorname = "SQLITE_FULL"
                raise error
            return real(db, ops)
        monkeypatch.setattr(writer_module, "run_transaction", run)

    def free(self) -> None:
        self.full = False


def full_disk_for(monkeypatch, *paths: Path) -> None:
    """Writing `paths` fails as on a full disk (ENOSPC), nothing else does."""
    blocked = {str(p) for p in paths}

    def fake_open(file, mode="r", *args, **kwargs):
        if str(file) in blocked and any(m in mode for m in "wax"):
            raise OSError(errno.ENOSPC, "No space left on device", str(file))
        return builtins.open(file, mode, *args, **kwargs)
    monkeypatch.setattr(journal_module, "open", fake_open, raising=False)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(folder))
    return folder


def test_a_full_disk_keeps_changes_in_the_cache_folder_and_the_next_start_saves_them(
        tmp_path, monkeypatch, cache):
    db = tmp_path / "t.db"
    store = ChatStore(db, retry=FAST)
    chat = store.create_chat("before")
    disk = FullDisk(monkeypatch)
    full_disk_for(monkeypatch, journal_module.journal_path(db))
    store = _reopen(store, db)
    asked = store.add_message(chat.id, "user", "sent while the disk was full")
    store.update_chat(chat.id, title="after")
    assert store.pending == 2 and store.pending_reason == "the disk is full"
    assert [f.parent for f in store.journal_files] == [cache / "pending"]
    assert not store.kept_in_memory_only
    assert store.close(timeout=0.2) == 2  # quitting now: 2 changes not saved yet
    disk.free()
    monkeypatch.undo()  # space is back, the journal beside the database works again
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(cache))
    again = ChatStore(db)
    assert "2 changes left from the last run were saved." in again.notices
    assert [m.content for m in again.messages(chat.id)] == ["sent while the disk was full"]
    assert again.messages(chat.id)[0].id == asked and again.chat(chat.id).title == "after"
    assert not list((cache / "pending").glob("*.jsonl"))  # nothing left waiting
    again.close()


def test_with_no_journal_anywhere_the_store_says_changes_live_in_memory_only(
        tmp_path, monkeypatch, cache):
    db = tmp_path / "t.db"
    ChatStore(db).close()
    disk = FullDisk(monkeypatch)
    full_disk_for(monkeypatch, journal_module.journal_path(db),
                  journal_module.fallback_journal_path(db))
    store = ChatStore(db, retry=FAST)
    chat = store.create_chat("only in memory")
    assert store.pending == 1 and store.kept_in_memory_only
    assert [c.title for c in store.chats()] == ["only in memory"]  # still readable
    disk.free()  # space is back before quitting: it is written after all
    assert store.wait_until_saved(10) and not store.kept_in_memory_only
    assert store.close() == 0
    monkeypatch.undo()
    assert [c.title for c in ChatStore(db).chats()] == ["only in memory"]
    assert chat.id


def _reopen(store: ChatStore, db: Path) -> ChatStore:
    store.close()
    return ChatStore(db, retry=FAST)
