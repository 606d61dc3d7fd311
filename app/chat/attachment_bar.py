"""The files attached to the message being written: one line each above the
composer (name, size, tokens; ✕ removes it), read and counted off the GUI
thread, and marked when they would not fit in the model's context."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (QHBoxLayout, QLabel, QSizePolicy, QStyle, QToolButton, QVBoxLayout,
                               QWidget)

from app.conversation.attach_files import Attachment, describe, read_attachment
from app.ui.plain_text import plain, tip


class AttachmentLoader(QObject):
    """Reads files and counts their tokens on a worker thread; `loaded(key,
    attachment)` arrives on the GUI thread."""

    loaded = Signal(object, object)

    def load(self, key, path: str | Path, count: Callable[[str], int] | None) -> None:
        def work():
            # `loaded` is sent whatever happens: the tab waits for every file
            # it asked for, and cannot send until each has come back.
            attachment = Attachment(Path(path).name, 0, error="It could not be read.")
            try:
                attachment = read_attachment(path)
                if attachment.error is None and count is not None:
                    try:
                        attachment.tokens = count(attachment.block())
                    except Exception as e:  # a tokenizer that cannot take it
                        attachment.error = f"It could not be tokenized ({str(e)[:80]})."
            except Exception as e:  # a bug or a library's surprise
                attachment = Attachment(Path(path).name, 0, error=f"It could not be read "
                                        f"({type(e).__name__}: {str(e)[:80]}).")
            finally:
                self.loaded.emit(key, attachment)

        threading.Thread(target=work, name="attach-file", daemon=True).start()


class AttachmentBar(QWidget):
    changed = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.files: list[Attachment] = []
        self.pending = 0  # files being read
        self._rows = QVBoxLayout(self)
        self._rows.setContentsMargins(0, 0, 0, 0)
        self._rows.setSpacing(2)
        self.over = False
        self.setVisible(False)

    @property
    def tokens(self) -> int:
        return sum(f.tokens or 0 for f in self.files)

    def add(self, attachment: Attachment) -> None:
        self.files.append(attachment)
        self._show()

    def set_files(self, files: list[Attachment]) -> None:
        self.files = list(files)
        self._show()

    def clear(self) -> None:
        self.files = []
        self._show()

    def mark_over(self, over: bool) -> None:
        """Colour the files red when they do not fit in the context."""
        if over != self.over:
            self.over = over
            self._show()

    def remove(self, attachment: Attachment) -> None:
        self.files = [f for f in self.files if f is not attachment]
        self._show()

    def _show(self) -> None:
        while self._rows.count():
            item = self._rows.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        for f in self.files:
            row = QWidget()
            layout = QHBoxLayout(row)
            layout.setContentsMargins(0, 0, 0, 0)
            icon = QLabel()
            icon.setPixmap(self.style().standardIcon(QStyle.SP_FileIcon).pixmap(16, 16))
            label = plain(QLabel(describe(f)))  # a file's name is text, never markup
            label.setToolTip(tip(f.name))
            label.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)  # never widens
            if self.over:
                label.setStyleSheet("color: #c0392b")
            remove = QToolButton()
            remove.setText("✕")
            remove.setToolTip(tip(f"Remove {f.name}"))
            remove.setAutoRaise(True)
            remove.clicked.connect(lambda _=False, a=f: self.remove(a))
            layout.addWidget(icon)
            layout.addWidget(label, 1)
            layout.addWidget(remove, 0, Qt.AlignRight)
            self._rows.addWidget(row)
        self.setVisible(bool(self.files))
        self.changed.emit()
