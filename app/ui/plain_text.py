"""Text from outside (a chat's title, a file's name, an API client's name, a
model's words) shown in tooltips and labels as the text it is: Qt renders a
string that looks like HTML as HTML there (tags, images from local paths)."""

from __future__ import annotations

from PySide6.QtCore import Qt as QtCore
from PySide6.QtGui import Qt


def tip(text: str) -> str:
    """A tooltip showing `text` literally (Qt guesses rich text for tooltips)."""
    # WhiteSpaceNormal: a long line still wraps (the default makes spaces hard).
    return Qt.convertFromPlainText(text, QtCore.WhiteSpaceNormal) if text else ""


def plain(label):
    """A QLabel that shows its text literally; returns it."""
    label.setTextFormat(QtCore.PlainText)
    return label
