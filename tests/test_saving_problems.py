"""Chats are never lost silently (issue 19), in the window: a database that
cannot be written is said at once in a dialog that keeps the chats going
(Retry now, Export chats…), the status bar says where the changes are kept,
and quitting with changes not saved asks first."""

from __future__ import annotations

import app.window.saving_status as saving_status
import app.store.journal as journal_module
from app.store import ChatStore
from tests.test_db_full_disk import FAST, FullDisk, full_disk_for
from tests.windows import open_window


def test_a_full_disk_is_said_at_once_and_quitting_asks_first(qtbot, tiny_model_dir, tmp_path,
                                                             monkeypatch):
    db = tmp_path / "t.db"
    store = ChatStore(db, retry=FAST)
    window = open_window(qtbot, tiny_model_dir, store)
    window.show()
    disk = FullDisk(monkeypatch)
    full_disk_for(monkeypatch, journal_module.journal_path(db),
                  journal_module.fallback_journal_path(db))
    tab = window.new_chat()  # a change the disk cannot take
    saving = window.status.saving
    qtbot.waitUntil(lambda: saving.problem_box is not None and saving.problem_box.isVisible(),
                    timeout=5_000)
    text = saving.problem_box.text()
    assert "the disk is full" in text and "memory" in text
    assert "in memory only" in saving.saving_label.text()
    # Export chats… puts every chat, waiting changes included, somewhere else.
    out = tmp_path / "exported"
    out.mkdir()
    monkeypatch.setattr(saving_status.QFileDialog, "getExistingDirectory",
                        staticmethod(lambda *a, **k: str(out)))
    (export,) = [b for b in saving.problem_box.buttons() if b.text() == saving_status.EXPORT]
    export.click()
    exported = sorted(p.read_text() for p in out.glob("*.md"))
    assert any(f"# {tab.title}" in md for md in exported)
    # Quitting now asks, and Cancel keeps the window and the changes.
    asked = []
    monkeypatch.setattr(saving_status, "ask",
                        lambda parent, title, text, buttons: asked.append(text) or
                        saving_status.CANCEL)
    window.close()
    assert asked and "not saved yet" in asked[0] and window.isVisible()
    # Space is back: Retry now writes everything and the dialog goes.
    disk.free()
    (retry,) = [b for b in saving.problem_box.buttons() if b.text() == saving_status.RETRY_NOW]
    retry.click()
    qtbot.waitUntil(lambda: store.pending == 0 and saving.problem_box is None, timeout=10_000)
    asked.clear()
    window.close()
    assert not asked and not window.isVisible()  # nothing left to ask about
    store.close()
    monkeypatch.undo()
    assert tab.chat_id in {c.id for c in ChatStore(db).chats()}


def test_quit_anyway_keeps_the_waiting_changes_for_the_next_start(qtbot, tiny_model_dir,
                                                                 tmp_path, monkeypatch):
    db = tmp_path / "t.db"
    store = ChatStore(db, retry=FAST)
    window = open_window(qtbot, tiny_model_dir, store)
    window.show()
    FullDisk(monkeypatch)
    tab = window.new_chat()
    qtbot.waitUntil(lambda: window.status.saving.problem_box is not None, timeout=5_000)
    assert "in " in window.status.saving.where_kept() and store.journal_files
    monkeypatch.setattr(saving_status, "ask", lambda *a: saving_status.QUIT)
    window.close()
    assert not window.isVisible()
    assert store.close(timeout=0.2) > 0
    monkeypatch.undo()
    again = ChatStore(db)
    assert any("left from the last run were saved" in n for n in again.notices)
    assert tab.chat_id in {c.id for c in again.chats()}
