"""The box a message is written in: Enter sends, Shift+Enter breaks the line,
and files dropped or pasted into it are attached rather than typed in."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QPlainTextEdit


class Composer(QPlainTextEdit):
    """Enter sends; Shift+Enter inserts a new line; files dropped (or pasted
    as files) are attached, not typed in as their paths."""

    submitted = Signal()
    files_dropped = Signal(list)  # local paths

    @staticmethod
    def _files(source) -> list[str]:
        urls = source.urls() if source.hasUrls() else []
        return [u.toLocalFile() for u in urls if u.isLocalFile()]

    def canInsertFromMimeData(self, source):  # noqa: N802
        return bool(self._files(source)) or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source):  # noqa: N802
        files = self._files(source)
        if files:
            self.files_dropped.emit(files)
        else:
            super().insertFromMimeData(source)

    def keyPressEvent(self, event):  # noqa: N802 (Qt naming)
        if event.key() in (Qt.Key_Return, Qt.Key_Enter) and not (
                event.modifiers() & Qt.ShiftModifier):
            self.submitted.emit()
            return
        super().keyPressEvent(event)
