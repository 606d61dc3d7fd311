"""Engine > Local server settings…: the port, an API key (kept in the OS
keyring, app/connections/keys.py), whether the server starts with Tandem,
an embedding model, and whether it fetches image URLs."""

from __future__ import annotations

import secrets

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (QCheckBox, QDialog, QDialogButtonBox, QFormLayout, QHBoxLayout,
                               QLabel, QLineEdit, QPushButton, QSpinBox, QVBoxLayout)

from app.connections import keys
from app.connections.local_server import KEY_NAME, ServerSettings


class ServerSettingsDialog(QDialog):
    def __init__(self, window):
        super().__init__(window)
        self.setWindowTitle("Local server settings")
        self.setMinimumWidth(480)
        self.window_ = window
        server = window.server
        settings = server.settings
        self.port = QSpinBox()
        self.port.setRange(1024, 65535)
        self.port.setValue(settings.port)
        self.require_key = QCheckBox("Clients must send this API key")
        self.require_key.setChecked(settings.require_key)
        self.key = QLineEdit(keys.get(KEY_NAME) or "")
        self.key.setReadOnly(True)
        self.key.setPlaceholderText("no key yet: New key makes one")
        self.new_key = QPushButton("New key")
        self.copy_key = QPushButton("Copy")
        self.new_key.clicked.connect(self._new_key)
        self.copy_key.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.key.text()))
        key_row = QHBoxLayout()
        key_row.addWidget(self.key, 1)
        key_row.addWidget(self.new_key)
        key_row.addWidget(self.copy_key)
        self.where = QLabel(keys.where("after a restart the server needs a new one."))
        self.where.setWordWrap(True)
        self.start_with = QCheckBox("Start the server when Tandem starts")
        self.start_with.setChecked(settings.start_with_tandem)
        self.image_urls = QCheckBox("Fetch image URLs in requests (http/https)")
        self.image_urls.setChecked(settings.image_urls)
        self.image_urls.setToolTip(
            "Off: images come as data: URLs or base64. On: the server fetches an image's "
            "web address itself, from public addresses only (never this computer or your "
            "network), no redirects, at most 20 MiB and 10 s an image.")
        self.embedding = QLineEdit(settings.embedding_model)
        self.embedding.setPlaceholderText("none (a BERT-style model folder or repo id)")
        self.embedding.setToolTip("Loaded beside the chat model, so /v1/embeddings answers; "
                                  "for example sentence-transformers/all-MiniLM-L6-v2")
        self.url = QLabel()
        self.port.valueChanged.connect(self._show_url)
        self._show_url()
        form = QFormLayout()
        form.addRow("Port", self.port)
        form.addRow("API key", key_row)
        form.addRow("", self.require_key)
        form.addRow("", self.where)
        form.addRow("", self.start_with)
        form.addRow("", self.image_urls)
        form.addRow("Embedding model", self.embedding)
        form.addRow("Address", self.url)
        note = QLabel("Only this computer can reach it (127.0.0.1). Web pages cannot call it "
                      "unless their origin is allowed (tandem serve --allow-origin).")
        note.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(note)
        layout.addWidget(buttons)
        self.require_key.toggled.connect(self._key_needed)

    def _show_url(self) -> None:
        self.url.setText(f"http://127.0.0.1:{self.port.value()}/v1")

    def _new_key(self) -> None:
        self.key.setText("tandem-" + secrets.token_urlsafe(24))

    def _key_needed(self, on: bool) -> None:
        if on and not self.key.text():
            self._new_key()

    def accept(self) -> None:
        """Keep the settings (and the key, in the keyring); a running server
        restarts with them."""
        window, server = self.window_, self.window_.server
        settings = ServerSettings(self.port.value(), self.require_key.isChecked(),
                                  self.start_with.isChecked(), self.embedding.text().strip(),
                                  self.image_urls.isChecked())
        if settings.embedding_model != server.settings.embedding_model:
            server.embedding.load(window.engine, settings.embedding_model)
        if settings.require_key and not self.key.text():
            self._new_key()
        key = self.key.text()
        if key and key != keys.get(KEY_NAME):
            kept = keys.put(KEY_NAME, key)
            if not kept:
                window.statusBar().showMessage(
                    "No system keyring: the Local server's key is kept for this session only.",
                    10_000)
        server.settings = settings
        if window.store is not None:
            settings.save(window.store)
        if server.running and window.engine is not None:
            window.toggle_server(True)  # again, with the new port and key
        super().accept()


def open_server_settings(window) -> ServerSettingsDialog:
    dialog = ServerSettingsDialog(window)
    dialog.open()
    return dialog
