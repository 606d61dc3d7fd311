"""The dialog shown, before the main window, when the chat database cannot be
used: what is wrong, where the file is, and the ways on that fit the problem
(app/store/db_open.py decides which and carries them out)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QHBoxLayout, QLabel, QLineEdit,
                               QPushButton, QStyle, QVBoxLayout, QWidget)

from app.ui.paths import instance_lock
from .chats import ChatStore
from .db_open import (FRESH, QUIT, READ_ONLY, RETRY, WAIT, DatabaseProblem, aside_name,
                      in_use_problem, open_store)

LABELS = {RETRY: "Retry", WAIT: "Open, save later", READ_ONLY: "Open read-only",
          FRESH: "Start fresh", QUIT: "Quit"}


def _explains(problem: DatabaseProblem) -> dict[str, str]:
    missing = not problem.path.exists()
    return {
        RETRY: "Try again, after fixing what is wrong.",
        WAIT: "Use Tandem now; changes wait (kept in a file beside the database) and are "
              "saved when the other program lets go.",
        READ_ONLY: ("Go on without saving: chats work until Tandem quits." if missing else
                    "Show the chats in it. New chats and messages are not saved."),
        FRESH: f"Move it aside as {aside_name(problem.path, problem.kind).name} (nothing is "
               f"deleted) and start with an empty database.",
        QUIT: "Quit Tandem and change nothing.",
    }


class DatabaseProblemDialog(QDialog):
    def __init__(self, problem: DatabaseProblem, parent: QWidget | None = None):
        super().__init__(parent)
        self.problem = problem
        self.choice = QUIT
        self.setWindowTitle("Tandem: chat history")
        self.setMinimumWidth(620)
        icon = QLabel()
        icon.setPixmap(self.style().standardIcon(QStyle.SP_MessageBoxWarning).pixmap(48, 48))
        icon.setAlignment(Qt.AlignTop)
        self.summary = QLabel(f"<b>{_escape(problem.summary)}</b>")
        self.detail = QLabel(problem.detail)
        self.location = QLineEdit(str(problem.path))  # selectable, for a file manager
        self.location.setReadOnly(True)
        self.location.setCursorPosition(0)
        explains = _explains(problem)
        self.choices_text = QLabel("<br>".join(
            f"<b>{LABELS[c]}</b>: {_escape(explains[c])}" for c in problem.choices))
        text = QVBoxLayout()
        text.setSpacing(6)
        for label in (self.summary, self.detail):
            label.setWordWrap(True)
            text.addWidget(label)
        text.addSpacing(6)
        text.addWidget(QLabel("Database file:"))
        text.addWidget(self.location)
        text.addSpacing(6)
        self.choices_text.setWordWrap(True)
        text.addWidget(self.choices_text)
        text.addStretch(1)
        top = QHBoxLayout()
        top.addWidget(icon, 0, Qt.AlignTop)
        top.addSpacing(8)
        top.addLayout(text, 1)
        buttons = QDialogButtonBox()
        self.buttons: dict[str, QPushButton] = {}
        for choice in problem.choices:
            button = buttons.addButton(LABELS[choice], QDialogButtonBox.RejectRole
                                       if choice == QUIT else QDialogButtonBox.AcceptRole)
            button.setToolTip(explains[choice])
            button.clicked.connect(lambda _=False, c=choice: self._choose(c))
            self.buttons[choice] = button
        self.buttons[problem.choices[0]].setDefault(True)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(buttons)
        self.resize(self.minimumWidth(), self.heightForWidth(self.minimumWidth()))

    def _choose(self, choice: str) -> None:
        self.choice = choice
        self.done(QDialog.Rejected if choice == QUIT else QDialog.Accepted)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def ask(problem: DatabaseProblem) -> str:
    """Show the dialog (modal) and return the user's choice."""
    dialog = DatabaseProblemDialog(problem)
    dialog.exec()
    return dialog.choice


def open_database(path: Path, choose=None):
    """The store for the app and the instance lock it holds (None where the
    folder allows no lock file), or None if the user quits. Problems are asked
    about with `choose` (default: the dialog) before any window exists."""
    choose = choose or ask
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # the lock file lives there
    except OSError:
        pass  # diagnose() says why the database cannot be created
    while True:
        lock, held_by_other = instance_lock(path)
        if not held_by_other:
            break
        choice = choose(in_use_problem(path))
        if choice == READ_ONLY:
            return ChatStore.open_read_only(path), None
        if choice != RETRY:
            return None
    store = open_store(path, choose)
    if store is None:
        if lock.isLocked():
            lock.unlock()
        return None
    return store, (lock if lock.isLocked() else None)

