"""The box a message is written in: Enter sends, Shift+Enter breaks the line,
and files dropped or pasted into it are attached rather than typed in, as
is an image pasted (a screenshot with Ctrl+V)."""

from __future__ import annotations

from PySide6.QtCore import QBuffer, QIODevice, Qt, Signal
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QPlainTextEdit


class Composer(QPlainTextEdit):
    """Enter sends; Shift+Enter inserts a new line; files dropped (or pasted
    as files) are attached, not typed in as their paths."""

    submitted = Signal()
    files_dropped = Signal(list)  # local paths
    image_pasted = Signal(bytes)  # an image from the clipboard, as PNG

    @staticmethod
    def image_png(source) -> bytes | None:
        """The image in `source` (a copied screenshot, an image copied from a
        browser) as PNG bytes, or None when it holds none."""
        if not source.hasImage():
            return None
        image = source.imageData()
        if not isinstance(image, QImage) or image.isNull():
            return None
        buffer = QBuffer()
        buffer.open(QIODevice.WriteOnly)
        image.save(buffer, "PNG")
        return bytes(buffer.data())

    @staticmethod
    def _files(source) -> list[str]:
        urls = source.urls() if source.hasUrls() else []
        return [u.toLocalFile() for u in urls if u.isLocalFile()]

    def canInsertFromMimeData(self, source):  # noqa: N802
        return bool(self._files(source)) or source.hasImage() or \
            super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source):  # noqa: N802
        files = self._files(source)
        if files:
            self.files_dropped.emit(files)
            return
        png = self.image_png(source)
        if png is not None:  # an image (its HTML or alt text beside it is not typed in)
            self.image_pasted.emit(png)
        else:
            super().insertFromMimeData(source)

    def keyPressEvent(self, event):  # noqa: N802 (Qt naming)
        if event.key() in (Qt.Key_Return, Qt.Key_Enter) and not (
                event.modifiers() & Qt.ShiftModifier):
            self.submitted.emit()
            return
        super().keyPressEvent(event)
