"""The window's layout kept between runs: its geometry, its docks and the
splitters inside them (Qt's saveState covers the docks, not a dock's own
splitters), and its open chat tabs, in the chat database."""

from __future__ import annotations

from PySide6.QtCore import QByteArray
from PySide6.QtWidgets import QSplitter


def _splitters(window) -> dict[str, QSplitter]:
    """Every named splitter in the window (objectName is the key)."""
    return {s.objectName(): s for s in window.findChildren(QSplitter) if s.objectName()}


def save_layout(window) -> None:
    store = window.store
    store.set_setting("window.geometry", _text(window.saveGeometry()))
    store.set_setting("window.state", _text(window.saveState()))
    store.set_setting("window.splitters",
                      {name: _text(s.saveState()) for name, s in _splitters(window).items()})


def restore_layout(window) -> None:
    store = window.store
    geometry, state = store.setting("window.geometry"), store.setting("window.state")
    if geometry:
        window.restoreGeometry(_bytes(geometry))
    if state:
        window.restoreState(_bytes(state))
    saved = store.setting("window.splitters") or {}
    for name, splitter in _splitters(window).items():
        if isinstance(saved, dict) and isinstance(saved.get(name), str):
            splitter.restoreState(_bytes(saved[name]))


def restore_tabs(window) -> None:
    """The chats open at the last exit, the current one in front (a new chat
    when none is left)."""
    ids, current = window.store.open_tabs()
    for chat_id in ids:
        try:
            window.open_chat(chat_id)
        except KeyError:  # deleted since
            continue
    if not window.chat_tabs():
        window.new_chat()
    elif current is not None:
        window.open_chat(current)


def save_tabs(window) -> None:
    current = window.current_tab()
    window.store.save_open_tabs([t.chat_id for t in window.chat_tabs()],
                                current.chat_id if current is not None else None)


def _text(data: QByteArray) -> str:
    return bytes(data.toBase64()).decode()


def _bytes(text: str) -> QByteArray:
    return QByteArray.fromBase64(text.encode())
