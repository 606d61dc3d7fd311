"""The files and images attached to the message being written: one line
each above the composer (a file's name, size and tokens; an image's
thumbnail, name and size; ✕ removes it), read, counted and checked off the
GUI thread, and marked when they would not fit in the model's context."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import (QHBoxLayout, QLabel, QSizePolicy, QStyle, QToolButton, QVBoxLayout,
                               QWidget)

from app.conversation import chat_images
from app.conversation.attach_files import Attachment, describe, read_attachment
from app.conversation.chat_images import ImageFile, is_image, read_image_bytes, read_image_file
from app.ui.plain_text import plain, tip


class AttachmentLoader(QObject):
    """Reads files and counts their tokens on a worker thread; `loaded(key,
    attachment)` arrives on the GUI thread (an ImageFile for an image: a
    file whose bytes are one, or `load_image`'s pasted bytes)."""

    loaded = Signal(object, object)

    def load_image(self, key, name: str, data: bytes) -> None:
        """An image's bytes (a paste): checked and made a thumbnail of."""
        def work():
            image = ImageFile(name, b"", error="It could not be read.")
            try:
                image = read_image_bytes(name, data)
            except Exception as e:  # a library's surprise: said, never lost in a thread
                image = ImageFile(name, b"", error=f"It could not be read ({type(e).__name__}).")
            finally:
                self.loaded.emit(key, image)

        threading.Thread(target=work, name="attach-image", daemon=True).start()

    def load(self, key, path: str | Path, count: Callable[[str], int] | None) -> None:
        if is_image(path):
            def work():
                image = ImageFile(Path(path).name, b"", error="It could not be read.")
                try:
                    image = read_image_file(path)
                except Exception as e:
                    image = ImageFile(Path(path).name, b"",
                                      error=f"It could not be read ({type(e).__name__}).")
                finally:
                    self.loaded.emit(key, image)

            threading.Thread(target=work, name="attach-image", daemon=True).start()
            return

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
        self.images: list[ImageFile] = []  # in the order the model sees them
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

    def add_image(self, image: ImageFile) -> None:
        self.images.append(image)
        self._show()

    def set_files(self, files: list[Attachment], images: list[ImageFile] | None = None) -> None:
        self.files = list(files)
        self.images = list(images or [])
        self._show()

    def clear(self) -> None:
        self.files, self.images = [], []
        self._show()

    def mark_over(self, over: bool) -> None:
        """Colour the files red when they do not fit in the context."""
        if over != self.over:
            self.over = over
            self._show()

    def remove(self, attachment: Attachment | ImageFile) -> None:
        self.files = [f for f in self.files if f is not attachment]
        self.images = [i for i in self.images if i is not attachment]
        self._show()

    def _show(self) -> None:
        while self._rows.count():
            item = self._rows.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        for f in self.images + self.files:
            row = QWidget()
            layout = QHBoxLayout(row)
            layout.setContentsMargins(0, 0, 0, 0)
            icon = QLabel()
            if isinstance(f, ImageFile):
                icon.setPixmap(_thumb(f.thumb, 40))
                text = chat_images.describe(f.record())
            else:
                icon.setPixmap(self.style().standardIcon(QStyle.SP_FileIcon).pixmap(16, 16))
                text = describe(f)
            label = plain(QLabel(text))  # a file's name is text, never markup
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
        self.setVisible(bool(self.files or self.images))
        self.changed.emit()


def _thumb(png: bytes, side: int) -> QPixmap:
    """A thumbnail's PNG as a pixmap at most `side` pixels a side (empty
    when it cannot be read)."""
    pixmap = QPixmap()
    if png and pixmap.loadFromData(png, "PNG"):
        return pixmap.scaled(side, side, Qt.KeepAspectRatio, Qt.SmoothTransformation)
    return QPixmap()
