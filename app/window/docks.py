"""The window's central tab bar and its docks (Chats, Scheduler), made to
the window's look; main_window wires what is in them."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDockWidget, QMainWindow, QTabWidget, QWidget


def chat_tab_bar() -> QTabWidget:
    """Closable, movable tabs whose titles shrink so every tab stays in view."""
    tabs = QTabWidget()
    tabs.setDocumentMode(True)
    tabs.setTabsClosable(True)
    tabs.setMovable(True)
    tabs.setElideMode(Qt.ElideRight)
    return tabs


def add_dock(window: QMainWindow, title: str, name: str, widget: QWidget,
             area: Qt.DockWidgetArea, features=None) -> QDockWidget:
    """`widget` in a dock on `area`; `name` keys its place in the saved layout."""
    dock = QDockWidget(title, window)
    dock.setObjectName(name)
    dock.setWidget(widget)
    if features is not None:
        dock.setFeatures(features)
    window.addDockWidget(area, dock)
    return dock
