"""The question asked before a tool runs, inside the chat it belongs to (a
dialog would block every other tab): which tool of which server, with the
arguments the model wrote, and Allow once / Always for this tool in this
chat / Deny. No button is a default and none takes the focus: typing
never answers it. The model's
arguments and the server's names are shown as plain text."""

from __future__ import annotations

import json

from PySide6.QtCore import Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton,
                               QSizePolicy, QVBoxLayout)

from app.ui.plain_text import plain
from app.ui.terminal import terminal_text

MAX_SHOWN = 20_000  # characters of arguments shown (all of them are sent)


class ApprovalBar(QFrame):
    """`decided("once" | "always" | "deny")` once the user answers."""

    decided = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("toolApproval")
        self.setFrameShape(QFrame.StyledPanel)
        self.question = plain(QLabel(""))
        self.question.setWordWrap(True)
        self.question.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        self.arguments = QPlainTextEdit()
        self.arguments.setReadOnly(True)
        self.arguments.setFont(QFontDatabase.systemFont(QFontDatabase.FixedFont))
        self.arguments.setMaximumHeight(120)
        self.allow_button = QPushButton("Allow once")
        self.always_button = QPushButton("Always for this tool in this chat")
        self.deny_button = QPushButton("Deny")
        for button, answer in ((self.allow_button, "once"), (self.always_button, "always"),
                               (self.deny_button, "deny")):
            button.setAutoDefault(False)
            button.setDefault(False)
            button.clicked.connect(lambda _=False, a=answer: self._answer(a))
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.deny_button)
        buttons.addWidget(self.always_button)
        buttons.addWidget(self.allow_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.question)
        layout.addWidget(self.arguments)
        layout.addLayout(buttons)
        self.hide()

    def ask(self, server: str, tool: str, arguments) -> None:
        """Show the question for one call (replacing any shown)."""
        self.question.setText(terminal_text(
            f"The model wants to run {tool} (tool server {server}) with these arguments. "
            "Nothing runs until you allow it."))
        shown = json.dumps(arguments, ensure_ascii=False, indent=2)
        if len(shown) > MAX_SHOWN:
            shown = shown[:MAX_SHOWN] + f"\n… {len(shown) - MAX_SHOWN:,} more characters"
        self.arguments.setPlainText(terminal_text(shown))
        self.show()  # the focus stays where it is: typing never answers it

    def _answer(self, answer: str) -> None:
        if not self.isHidden():  # asked, not answered yet
            self.hide()
            self.decided.emit(answer)
