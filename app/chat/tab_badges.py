"""A dot on a chat's tab when its answer finishes while another tab is in
front; it goes when the tab is shown."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPixmap

from app.ui.plain_text import tip

_DOT: QIcon | None = None


def dot() -> QIcon:
    global _DOT
    if _DOT is None:
        pixmap = QPixmap(12, 12)
        pixmap.fill(Qt.transparent)
        painter = QPainter(pixmap)
        painter.setRenderHint(QPainter.Antialiasing)
        painter.setBrush(QColor("#2e86de"))
        painter.setPen(Qt.NoPen)
        painter.drawEllipse(2, 2, 8, 8)
        painter.end()
        _DOT = QIcon(pixmap)
    return _DOT


def install(window) -> None:
    window.tabs.currentChanged.connect(lambda index: clear(window, index))


def finished(window, tab) -> None:
    """`tab`'s answer ended: badge it unless it is the tab in front."""
    index = window.tabs.indexOf(tab)
    if index >= 0 and window.tabs.currentIndex() != index:
        tab.unread = True
        window.tabs.setTabIcon(index, dot())
        window.tabs.setTabToolTip(index, tip(f"{tab.title} — a new answer"))


def clear(window, index: int) -> None:
    tab = window.tabs.widget(index)
    if tab is not None and getattr(tab, "unread", False):
        tab.unread = False
        window.tabs.setTabIcon(index, QIcon())
        window.tabs.setTabToolTip(index, tip(tab.title))
