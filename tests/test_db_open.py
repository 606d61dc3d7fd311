"""A chat database Tandem cannot use, on real files: each case is explained
(what, where) with ways on - retry, read-only, start fresh - and none of them
changes a byte of what is stored."""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from app.store import ChatStore
from app.store.db_open import FRESH, QUIT, READ_ONLY, RETRY, WAIT, diagnose, open_store
from tests.test_db_holder import LockHolder


def make_history(db: Path, messages: int = 4) -> None:
    store = ChatStore(db)
    trip = store.create_chat("Paris trip")
    for i in range(messages):
        store.add_message(trip.id, "user" if i % 2 == 0 else "assistant",
                          f"message {i} " + "about museums and trains " * 12)
    store.create_chat("Rust questions")
    store.close()


HASHES = """
import hashlib, json, pathlib, sys
out = {}
for suffix in ("", "-wal"):
    f = pathlib.Path(sys.argv[1] + suffix)
    if f.is_file() and f.stat().st_size:
        out[suffix] = hashlib.sha256(f.read_bytes()).hexdigest()
print(json.dumps(out))
"""


def stored(db: Path) -> dict[str, str]:
    """Hashes of what holds the chats: the file and a non-empty WAL. Read by
    another process: closing a file this one has open through SQLite would
    drop SQLite's locks on it (POSIX locks are per process)."""
    out = subprocess.run([sys.executable, "-c", HASHES, str(db)], capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)


@pytest.fixture
def folder():
    """A folder another user can reach (tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="tandem-db-test-"))
    os.chmod(path, 0o755)
    yield path
    for d, _, _ in os.walk(path):
        os.chmod(d, 0o755)
    shutil.rmtree(path)


@contextmanager
def without_rights():
    """Permissions bind root in no way: act as `nobody` for a read-only case."""
    if os.geteuid() != 0:
        yield
        return
    os.setegid(65534)
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


# Each case: (make it, kind, choices). `make` returns the database path and
# may return a lock holder to release.
def read_only_file(folder):
    db = folder / "tandem.db"
    make_history(db)
    os.chmod(folder, 0o777)  # the folder is writable: only the file is not
    if os.geteuid() == 0:
        os.chown(db, 65534, 65534)  # the user's own file (so they can fix it), made read-only
    os.chmod(db, 0o444)
    return db


def read_only_folder(folder):
    db = folder / "tandem.db"
    make_history(db)
    os.chmod(db, 0o666)
    os.chmod(folder, 0o555)
    return db


def locked(folder):
    db = folder / "tandem.db"
    make_history(db)
    con = sqlite3.connect(db)  # another program's rollback-journal database:
    con.execute("PRAGMA journal_mode=DELETE")  # its exclusive lock shuts readers out too
    con.close()
    return db


def is_a_folder(folder):
    db = folder / "tandem.db"
    db.mkdir()
    (db / "notes.txt").write_text("not a database")
    return db


def garbage_header(folder):
    db = folder / "tandem.db"
    make_history(db)
    with open(db, "r+b") as f:
        f.write(b"GARBAGE GARBAGE GARBAGE!")
    return db


def garbage_middle(folder):
    db = folder / "tandem.db"
    make_history(db, messages=300)
    data = bytearray(db.read_bytes())
    page = 4096
    middle = (len(data) // page // 2) * page
    data[middle:middle + page] = random.Random(7).randbytes(page)
    db.write_bytes(bytes(data))
    return db


def newer_schema(folder):
    db = folder / "tandem.db"
    make_history(db)
    con = sqlite3.connect(db)
    con.execute("PRAGMA user_version = 99")
    con.close()
    return db


CASES = {
    "read-only-file": (read_only_file, (RETRY, READ_ONLY, FRESH, QUIT)),
    "read-only-folder": (read_only_folder, (RETRY, READ_ONLY, QUIT)),
    "locked": (locked, (RETRY, QUIT)),
    "folder": (is_a_folder, (RETRY, FRESH, QUIT)),
    "not-a-database": (garbage_header, (RETRY, FRESH, QUIT)),
    "malformed": (garbage_middle, (RETRY, READ_ONLY, FRESH, QUIT)),
    "newer-schema": (newer_schema, (READ_ONLY, FRESH, QUIT)),
}


@contextmanager
def case(name, folder):
    """The broken database, as the user would meet it (locked: by another
    process; read-only: for a user without rights)."""
    db = CASES[name][0](folder)
    before = stored(db)
    if name == "locked":
        with LockHolder(db, "EXCLUSIVE"):
            yield db
    elif name.startswith("read-only"):
        with without_rights():
            yield db
    else:
        yield db
    assert stored(db) == before, "the stored database was changed"


def chooser(*answers):
    """A `choose` that records the problems it is shown and answers in turn."""
    asked = []

    def choose(problem):
        asked.append(problem)
        return answers[len(asked) - 1]

    choose.asked = asked
    return choose


@pytest.mark.parametrize("name", list(CASES))
def test_each_problem_is_explained_with_ways_on_and_changes_nothing(name, folder):
    with case(name, folder) as db:
        choose = chooser(QUIT)
        assert open_store(db, choose) is None
    (problem,) = choose.asked
    assert problem.kind == name
    assert problem.path == db
    assert problem.choices == CASES[name][1]
    assert problem.summary.startswith("The ") and problem.detail


@pytest.mark.parametrize("name", ["read-only-file", "read-only-folder", "malformed",
                                  "newer-schema"])
def test_read_only_shows_the_history_and_saves_nothing(name, folder):
    with case(name, folder) as db:
        store = open_store(db, chooser(READ_ONLY))
        assert store.read_only
        titles = {c.title for c in store.chats()}
        assert titles == {"Paris trip", "Rust questions"}
        trip = next(c for c in store.chats() if c.title == "Paris trip")
        kept = store.messages(trip.id)
        assert kept[0].content.startswith("message 0 ")
        if name == "malformed":  # what was on the damaged page is gone, the rest is there
            assert 200 < len(kept) < 300 and kept[-1].content.startswith("message 299 ")
            assert "could not be read" in " ".join(store.notices)
        else:
            assert len(kept) == 4
        # The session works: a new chat and its messages, in memory only.
        new = store.create_chat("Not saved")
        store.add_message(new.id, "user", "hello")
        assert [m.content for m in store.messages(new.id)] == ["hello"]
        assert store.close() == 0
    assert not store.journal_path.exists()


def test_locked_then_retry_opens_it_once_the_other_program_lets_go(folder):
    db = locked(folder)
    before = stored(db)
    holder = LockHolder(db, "EXCLUSIVE")

    def choose(problem):
        assert problem.kind == "locked" and stored(db) == before
        holder.release()  # the user closes the other program
        return RETRY

    store = open_store(db, choose)
    assert not store.read_only
    assert {c.title for c in store.chats()} == {"Paris trip", "Rust questions"}
    store.create_chat("saved")
    store.close()
    assert "saved" in {c.title for c in ChatStore(db).chats()}


def test_a_write_lock_held_at_start_is_explained_and_tandem_can_open_anyway(tmp_path):
    # Tandem's own (WAL) database: reads go on, only writing must wait.
    db = tmp_path / "tandem.db"
    make_history(db)
    before = stored(db)
    with LockHolder(db, "IMMEDIATE"):
        choose = chooser(WAIT)
        store = open_store(db, choose)
        (problem,) = choose.asked
        assert (problem.kind, problem.choices) == ("locked", (RETRY, WAIT, READ_ONLY, QUIT))
        assert stored(db) == before
        assert not store.read_only and len(store.chats()) == 2
        chat = store.create_chat("typed while locked")
        assert store.pending == 1
    assert store.wait_until_saved(10)
    assert "typed while locked" in {c.title for c in ChatStore(db).chats()}
    assert chat.id == 3
    store.close()


def test_a_write_lock_held_at_start_then_retry_once_it_is_gone(tmp_path):
    db = tmp_path / "tandem.db"
    make_history(db)
    holder = LockHolder(db, "IMMEDIATE")

    def choose(problem):
        holder.release()
        return RETRY

    store = open_store(db, choose)
    store.check_writable()
    assert store.pending == 0
    store.close()


def test_read_only_file_then_retry_after_fixing_it_opens_it_writable(folder):
    db = read_only_file(folder)

    def choose(problem):
        os.chmod(db, 0o666)  # the user fixes the permissions
        return RETRY

    with without_rights():
        store = open_store(db, choose)
        store.create_chat("saved")
        assert store.pending == 0  # written at once: nothing left read-only beside it
        store.close()
    assert "saved" in {c.title for c in ChatStore(db).chats()}


@pytest.mark.parametrize("name", ["not-a-database", "malformed", "newer-schema", "folder"])
def test_start_fresh_moves_the_old_file_aside_and_deletes_nothing(name, folder):
    db = CASES[name][0](folder)
    before = stored(db)
    Path(f"{db}-pending.jsonl").write_text('{"session": "x"}\n') if name != "folder" else None
    store = open_store(db, chooser(FRESH))
    assert store.chats() == [] and not store.read_only
    (moved,) = [p for p in folder.iterdir() if p.name.startswith("tandem.db.")
                and not p.name.endswith(("-wal", "-shm", "-pending.jsonl", ".lock"))]
    label = "newer" if name == "newer-schema" else "damaged"
    assert moved.name.startswith(f"tandem.db.{label}-")
    assert stored(moved) == before  # the very same bytes, under the new name
    if name == "folder":
        assert (moved / "notes.txt").read_text() == "not a database"
    else:
        assert Path(f"{moved}-pending.jsonl").exists()  # its journal went with it
    assert str(moved) in " ".join(store.notices)
    store.create_chat("fresh")
    store.close()


def test_a_missing_folder_that_cannot_be_made_offers_going_on_without_saving(folder):
    os.chmod(folder, 0o555)
    db = folder / "sub" / "tandem.db"
    with without_rights():
        choose = chooser(READ_ONLY)
        store = open_store(db, choose)
    assert choose.asked[0].kind == "cannot-create"
    assert store.read_only and store.chats() == []
    store.close()
    assert not db.parent.exists()


def test_a_healthy_database_opens_without_asking(tmp_path):
    db = tmp_path / "tandem.db"
    make_history(db)
    assert diagnose(db) is None and diagnose(tmp_path / "new.db") is None
    store = open_store(db, chooser())
    assert len(store.chats()) == 2
    store.close()
