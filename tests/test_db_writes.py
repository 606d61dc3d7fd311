"""Writes while another process holds the database's lock: they never block the
caller, never get lost, keep their order, are readable at once, reach the file
when the lock goes away, and survive quitting or a crash meanwhile (journal)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from app.store import ChatStore
from tests.test_db_holder import LockHolder

ROOT = Path(__file__).resolve().parents[1]
NO_BUSY_WAIT_S = 2.5  # a write used to wait 5 s for the lock; now it never waits


def on_disk(db: Path, sql: str, args: tuple = ()) -> list[tuple]:
    """What the file itself holds, through a connection of its own."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def test_writes_under_a_lock_return_at_once_read_back_and_land_when_it_goes(tmp_path):
    db = tmp_path / "t.db"
    store = ChatStore(db)
    first = store.create_chat("before the lock")
    reports, reported = [], threading.Condition()

    def report(count, why):  # from the caller's thread, and the writer's after each try
        with reported:
            reports.append((count, why))
            reported.notify_all()

    store.on_pending = report
    with LockHolder(db):
        started = time.monotonic()
        chat = store.create_chat("during the lock")
        asked = store.add_message(chat.id, "user", "hello")
        answer = store.add_message(chat.id, "assistant", "", complete=False)
        for text in ("He", "Hel", "Hello there"):  # a streaming answer's flushes
            store.update_message(answer, text)
        store.update_message(answer, "Hello there!", complete=True, stats={"footer": "3 tok"})
        store.update_chat(chat.id, title="Greetings")
        store.set_setting("mode", "hybrid")
        store.save_open_tabs([first.id, chat.id], chat.id)
        assert time.monotonic() - started < NO_BUSY_WAIT_S
        assert store.pending == 10
        assert reports[-1] == (10, "the database is locked by another program")
        # The app reads back what it wrote, though none of it is in the file yet.
        assert [c.title for c in store.chats()] == ["Greetings", "before the lock"]
        assert [(m.id, m.content, m.complete) for m in store.messages(chat.id)] == [
            (asked, "hello", True), (answer, "Hello there!", True)]
        assert store.messages(chat.id)[1].stats == {"footer": "3 tok"}
        assert store.setting("mode") == "hybrid"
        assert store.open_tabs() == ([first.id, chat.id], chat.id)
        assert on_disk(db, "SELECT count(*) FROM messages") == [(0,)]
        assert store.journal_path.exists()
        # The writer retries meanwhile (it reports each try), and keeps everything.
        with reported:
            seen = len(reports)
            assert reported.wait_for(lambda: len(reports) >= seen + 3, 10)
            assert set(reports[seen:]) == {(10, "the database is locked by another program")}
        assert store.pending == 10
    assert store.wait_until_saved(10)
    assert reports[-1] == (0, None)
    assert on_disk(db, "SELECT id, content, complete FROM messages ORDER BY id") == [
        (asked, "hello", 1), (answer, "Hello there!", 1)]
    assert on_disk(db, "SELECT title FROM chats ORDER BY id") == [("before the lock",),
                                                                  ("Greetings",)]
    assert on_disk(db, "SELECT chat_id, is_current FROM open_tabs ORDER BY position") == [
        (first.id, 0), (chat.id, 1)]
    assert not store.journal_path.exists()
    assert store.close() == 0


def test_a_write_after_the_lock_goes_keeps_its_place_behind_waiting_ones(tmp_path):
    db = tmp_path / "t.db"
    store = ChatStore(db, retry=(1.0, 1.0))  # the writer's next try is a second away
    chat = store.create_chat()
    answer = store.add_message(chat.id, "assistant", "", complete=False)
    with LockHolder(db):
        store.update_message(answer, "older flush")
    # The lock is free, but "older flush" still waits: this one must not overtake it.
    store.update_message(answer, "newest flush")
    assert store.wait_until_saved(10)
    assert on_disk(db, "SELECT content FROM messages") == [("newest flush",)]
    store.close()


def test_changes_waiting_at_quit_are_kept_and_written_first_at_the_next_start(tmp_path):
    db = tmp_path / "t.db"
    store = ChatStore(db)
    chat = store.create_chat()
    with LockHolder(db):
        kept = store.add_message(chat.id, "user", "typed while locked")
        assert store.close(timeout=0.2) == 1  # waited briefly, then kept it
        assert store.journal_path.exists()
    assert on_disk(db, "SELECT count(*) FROM messages") == [(0,)]
    again = ChatStore(db)
    assert [(m.id, m.content) for m in again.messages(chat.id)] == [(kept, "typed while locked")]
    assert on_disk(db, "SELECT id, content FROM messages") == [(kept, "typed while locked")]
    assert not again.journal_path.exists()
    assert again.add_message(chat.id, "user", "next") > kept  # ids continue after it
    again.close()


def test_changes_waiting_when_the_app_is_killed_are_written_at_the_next_start(tmp_path):
    db = tmp_path / "t.db"
    store = ChatStore(db)
    chat = store.create_chat()
    store.close()
    child = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from app.store import ChatStore
        s = ChatStore({str(db)!r})
        m = s.add_message({chat.id}, "assistant", "", complete=False)
        s.update_message(m, "partial answer")
        assert s.pending == 2, s.pending
        os._exit(9)  # killed: no close
    """)
    with LockHolder(db):
        assert subprocess.run([sys.executable, "-c", child]).returncode == 9
        # Still locked at the next start: the app opens, reads them, and waits.
        again = ChatStore(db)
        assert again.pending == 2
        assert [m.content for m in again.messages(chat.id)] == ["partial answer"]
        assert on_disk(db, "SELECT count(*) FROM messages") == [(0,)]
    assert again.wait_until_saved(10)
    assert on_disk(db, "SELECT content, complete FROM messages") == [("partial answer", 0)]
    assert not again.journal_path.exists()
    again.close()


def test_a_journal_left_after_its_changes_were_written_is_not_written_twice(tmp_path):
    db = tmp_path / "t.db"
    store = ChatStore(db)
    chat = store.create_chat()
    with LockHolder(db):
        store.add_message(chat.id, "user", "once")
        journal = store.journal_path.read_bytes()
    assert store.wait_until_saved(10)
    store.close()
    # As if killed between writing the change and deleting the journal.
    store.journal_path.write_bytes(journal)
    again = ChatStore(db)
    assert [m.content for m in again.messages(chat.id)] == ["once"]
    assert not again.journal_path.exists()
    again.close()


def test_a_message_sent_while_another_program_holds_the_lock_is_saved_after(
        qtbot, tiny_model_dir, tmp_path):
    from tests.windows import open_window

    db = tmp_path / "t.db"
    window = open_window(qtbot, tiny_model_dir, db)
    tab = window.chat_tabs()[0]
    with LockHolder(db):
        tab.composer.setPlainText("hello while the database is locked")
        started = time.monotonic()
        tab.send()
        assert time.monotonic() - started < NO_BUSY_WAIT_S  # the window did not freeze
        qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
        answer = tab.conversation.messages[-1]["content"]
        assert answer
        warning = window.status.saving.saving_label
        assert not warning.isHidden()
        assert warning.text().startswith(
            "⚠ Saving is delayed: the database is locked by another program (")
        assert "changes waiting)" in warning.text()
        assert on_disk(db, "SELECT count(*) FROM messages") == [(0,)]
        window.show()
        window.grab().save(str(tmp_path / "saving_delayed.png"))
        if os.environ.get("TANDEM_SHOTS"):
            window.grab().save(os.environ["TANDEM_SHOTS"] + "/saving_delayed.png")
    qtbot.waitUntil(lambda: warning.isHidden(), timeout=10_000)
    assert on_disk(db, "SELECT role, content, complete FROM messages WHERE chat_id = ? "
                   "ORDER BY id", (tab.chat_id,)) == [
        ("user", "hello while the database is locked", 1), ("assistant", answer, 1)]
    assert on_disk(db, "SELECT title FROM chats WHERE id = ?", (tab.chat_id,)) == [
        ("hello while the database is locked",)]
    window.close()
