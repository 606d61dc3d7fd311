"""The chat list: search, new, rename, delete. Emits chat ids; the window acts."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QHBoxLayout, QInputDialog, QLineEdit, QListWidget,
                               QListWidgetItem, QMenu, QPushButton, QVBoxLayout, QWidget)

from app.store import ChatStore


class ChatSidebar(QWidget):
    open_requested = Signal(int)
    new_requested = Signal()
    deleted = Signal(int)

    def __init__(self, store: ChatStore, parent: QWidget | None = None):
        super().__init__(parent)
        self.store = store
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search chats")
        self.search.setClearButtonEnabled(True)
        self.list = QListWidget()
        self.list.setContextMenuPolicy(Qt.CustomContextMenu)
        self.list.setTextElideMode(Qt.ElideRight)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.new_button = QPushButton("New chat")
        top = QHBoxLayout()
        top.addWidget(self.search, 1)
        top.addWidget(self.new_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(self.list, 1)
        self.search.textChanged.connect(self.refresh)
        self.new_button.clicked.connect(self.new_requested.emit)
        self.list.itemActivated.connect(self._open)
        self.list.itemClicked.connect(self._open)
        self.list.customContextMenuRequested.connect(self._menu)
        self.refresh()

    def refresh(self) -> None:
        self.list.clear()
        query = self.search.text().strip()
        for chat in self.store.chats(query):
            item = QListWidgetItem(chat.title)
            item.setData(Qt.UserRole, chat.id)
            self.list.addItem(item)
        if query and not self.list.count():  # say so, rather than show an empty list
            empty = QListWidgetItem(f"No chats match “{query}”.")
            empty.setFlags(Qt.NoItemFlags)
            self.list.addItem(empty)

    def _open(self, item: QListWidgetItem) -> None:
        chat_id = item.data(Qt.UserRole)
        if chat_id is not None:  # not the "no chats match" line
            self.open_requested.emit(chat_id)

    def rename(self, chat_id: int, title: str) -> None:
        if title.strip():
            self.store.update_chat(chat_id, title=title.strip())
            self.refresh()

    def delete(self, chat_id: int) -> None:
        self.store.delete_chat(chat_id)
        self.refresh()
        self.deleted.emit(chat_id)

    def _menu(self, pos) -> None:
        item = self.list.itemAt(pos)
        if item is None or item.data(Qt.UserRole) is None:
            return
        chat_id = item.data(Qt.UserRole)
        menu = QMenu(self)
        rename = menu.addAction("Rename…")
        delete = menu.addAction("Delete")
        chosen = menu.exec(self.list.mapToGlobal(pos))
        if chosen is rename:
            title, ok = QInputDialog.getText(self, "Rename chat", "Title:", text=item.text())
            if ok:
                self.rename(chat_id, title)
        elif chosen is delete:
            self.delete(chat_id)
