"""The database dialog, shown before the main window; a second Tandem on the
same database; and the main window on a read-only database."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app.window.main_window import MainWindow
from app.store import ChatStore, db_dialog
from app.store.db_dialog import DatabaseProblemDialog, ask, open_database
from app.store.db_open import FRESH, QUIT, READ_ONLY, RETRY, _write_locked, diagnose
from tests.test_db_open import CASES, make_history, stored

SHOTS = os.environ.get("TANDEM_SHOTS")  # a folder: keep the screenshots to look at


@pytest.mark.parametrize("name", ["malformed", "not-a-database", "newer-schema", "locked"])
def test_the_dialog_says_what_is_wrong_where_and_offers_the_ways_on(qtbot, tmp_path, name):
    if name == "locked":  # held while Tandem starts; built directly (no holder needed)
        db = tmp_path / "tandem.db"
        make_history(db)
        problem = _write_locked(db)
    else:
        db = CASES[name][0](tmp_path)
        problem = diagnose(db)
    dialog = DatabaseProblemDialog(problem)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    assert problem.summary in dialog.summary.text()
    assert dialog.location.text() == str(db)
    labels = {"retry": "Retry", "wait": "Open, save later", "read-only": "Open read-only",
              "fresh": "Start fresh", "quit": "Quit"}
    assert [dialog.buttons[c].text() for c in problem.choices] == [
        labels[c] for c in problem.choices]
    if FRESH in problem.choices:
        assert "nothing is deleted" in dialog.choices_text.text()
    dialog.grab().save(str(tmp_path / "dialog.png"))
    if SHOTS:
        dialog.grab().save(f"{SHOTS}/db_dialog_{name}.png")


def test_the_real_dialog_returns_the_button_the_user_clicks(qtbot, tmp_path):
    db = CASES["malformed"][0](tmp_path)

    def click_read_only():
        dialog = QApplication.activeModalWidget()
        assert isinstance(dialog, DatabaseProblemDialog)
        dialog.buttons[READ_ONLY].click()

    QTimer.singleShot(100, click_read_only)
    assert ask(diagnose(db)) == READ_ONLY


def test_run_gui_asks_before_any_window_opens(qtbot, tmp_path, monkeypatch):
    from app.gui import run_gui

    db = CASES["not-a-database"][0](tmp_path)
    before = stored(db)
    monkeypatch.setenv("TANDEM_DB", str(db))
    asked = []

    def fake_ask(problem):
        asked.append(problem)
        assert not [w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow)]
        return QUIT

    monkeypatch.setattr(db_dialog, "ask", fake_ask)
    assert run_gui("default") == 1
    assert [p.kind for p in asked] == ["not-a-database"]
    assert stored(db) == before


def test_a_second_tandem_on_the_same_database_is_told_so(qtbot, tmp_path):
    db = tmp_path / "tandem.db"
    make_history(db)
    store, lock = open_database(db, choose=lambda p: pytest.fail(f"asked {p}"))
    asked = []

    def choose(problem):
        asked.append(problem.kind)
        return {1: RETRY, 2: READ_ONLY}[len(asked)]

    second, no_lock = open_database(db, choose)  # "another Tandem": retry, then read-only
    assert asked == ["in-use", "in-use"]
    assert second.read_only and no_lock is None and len(second.chats()) == 2
    second.close()
    store.close()
    lock.unlock()
    third, third_lock = open_database(db, choose=lambda p: pytest.fail(f"asked {p}"))
    assert not third.read_only
    third.close()
    third_lock.unlock()


def test_a_read_only_window_shows_the_history_says_so_and_saves_nothing(
        qtbot, tiny_model_dir, tmp_path):
    from tests.windows import open_window

    db = tmp_path / "tandem.db"
    make_history(db)
    before = stored(db)
    store = ChatStore.open_read_only(db)
    window = open_window(qtbot, tiny_model_dir, store)
    assert not window.status.saving.read_only_label.isHidden()
    assert window.status.saving.read_only_label.text() == "Read-only: new chats are not saved"
    assert "read-only" in window.windowTitle()
    sidebar = [window.sidebar.list.item(i).text() for i in range(window.sidebar.list.count())]
    assert set(sidebar) >= {"Paris trip", "Rust questions"}
    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("hello")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    assert [m.role for m in window.store.messages(tab.chat_id)] == ["user", "assistant"]
    window.show()
    window.grab().save(str(tmp_path / "read_only.png"))
    if SHOTS:
        window.grab().save(f"{SHOTS}/db_read_only_window.png")
    window.close()
    store.close()
    assert stored(db) == before
    assert not Path(f"{db}-pending.jsonl").exists()
