"""An attached image at full size: a window of its own (not modal: the chat
goes on), scaled down to fit the screen, scrollable at 100%."""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QBuffer, QIODevice, Qt
from PySide6.QtGui import QGuiApplication, QImageReader, QPixmap
from PySide6.QtWidgets import (QDialog, QHBoxLayout, QLabel, QPushButton, QScrollArea,
                               QVBoxLayout, QWidget)

from app.conversation.chat_images import describe
from app.ui.plain_text import plain


def read_pixmap(data: bytes | None) -> tuple[QPixmap, str | None]:
    """The image's pixels, or why they cannot be shown. Qt's own reader
    (its allocation limit kept): the bytes were checked when attached."""
    if not data:
        return QPixmap(), "The image is no longer kept with this chat."
    buffer = QBuffer()
    buffer.setData(QByteArray(data))
    buffer.open(QIODevice.ReadOnly)
    reader = QImageReader(buffer)
    reader.setAutoTransform(True)  # a photo's EXIF orientation, as the model saw it
    image = reader.read()
    if image.isNull():
        return QPixmap(), f"The image cannot be shown ({reader.errorString()})."
    return QPixmap.fromImage(image), None


class ImageViewer(QDialog):
    def __init__(self, record: dict, data: bytes | None, parent: QWidget | None = None):
        super().__init__(parent)
        self.setAttribute(Qt.WA_DeleteOnClose)
        self.setWindowTitle(describe(record))
        self.pixmap, error = read_pixmap(data)
        self.picture = plain(QLabel(error or ""))
        self.picture.setAlignment(Qt.AlignCenter)
        self.scroll = QScrollArea()
        self.scroll.setWidget(self.picture)
        self.scroll.setWidgetResizable(True)
        self.scroll.setAlignment(Qt.AlignCenter)
        self.actual = QPushButton("Actual size")
        self.actual.setCheckable(True)
        self.actual.setEnabled(not self.pixmap.isNull())
        self.actual.toggled.connect(self._show)
        close = QPushButton("Close")
        close.clicked.connect(self.close)
        buttons = QHBoxLayout()
        buttons.addWidget(self.actual)
        buttons.addStretch(1)
        buttons.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.scroll, 1)
        layout.addLayout(buttons)
        screen = (parent.screen() if parent is not None else QGuiApplication.primaryScreen())
        room = screen.availableGeometry().size() * 0.85 if screen is not None else None
        if not self.pixmap.isNull() and room is not None:
            self.resize(min(self.pixmap.width() + 40, room.width()),
                        min(self.pixmap.height() + 80, room.height()))
        self._show(False)

    def _show(self, actual: bool) -> None:
        if self.pixmap.isNull():
            return
        if actual:
            self.scroll.setWidgetResizable(False)
            self.picture.setPixmap(self.pixmap)
            self.picture.adjustSize()
        else:
            self.scroll.setWidgetResizable(True)
            self.picture.setPixmap(self._fitted())

    def _fitted(self) -> QPixmap:
        room = self.scroll.viewport().size()
        if self.pixmap.width() <= room.width() and self.pixmap.height() <= room.height():
            return self.pixmap
        return self.pixmap.scaled(room, Qt.KeepAspectRatio, Qt.SmoothTransformation)

    def resizeEvent(self, event):  # noqa: N802 (Qt naming)
        super().resizeEvent(event)
        if not self.actual.isChecked():
            self._show(False)
