"""Settings… (on macOS in the application menu, Cmd+,): what applies to the
whole app rather than one chat. Today: KV kept on disk so chats resume warm
after a restart (issue 33), on or off and its byte budget; both take effect
when a model is next loaded (the engine opens its disk tier at load)."""

from __future__ import annotations

from PySide6.QtWidgets import (QCheckBox, QDialog, QDialogButtonBox, QDoubleSpinBox,
                               QFormLayout, QLabel, QVBoxLayout)

from app.models.engine_loader import KV_GIB, KV_ON, kv_disk

class SettingsDialog(QDialog):
    def __init__(self, window):
        super().__init__(window)
        self.setWindowTitle("Settings")
        self.setMinimumWidth(460)
        self.store = window.store
        current = kv_disk(self.store)
        self.kv_on = QCheckBox("Keep chats' KV on disk, so they resume warm after a restart")
        self.kv_on.setChecked(current.on)
        self.kv_gib = QDoubleSpinBox()
        self.kv_gib.setRange(0.0, 1024.0)
        self.kv_gib.setDecimals(1)
        self.kv_gib.setSuffix(" GiB")
        self.kv_gib.setSpecialValueText("automatic (at most 10 GiB)")
        self.kv_gib.setValue((current.budget_bytes or 0) / (1 << 30))
        self.kv_gib.setEnabled(current.on)
        self.kv_on.toggled.connect(self.kv_gib.setEnabled)
        note = QLabel("Kept in Tandem's cache folder, readable only by you; the least recently "
                      "used goes first when the budget is full, and deleting a chat removes "
                      "what only it used. Applies when a model is next loaded. "
                      "Chat > Clear saved KV empties it now.")
        note.setWordWrap(True)
        form = QFormLayout()
        form.addRow("", self.kv_on)
        form.addRow("Saved KV budget", self.kv_gib)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(note)
        layout.addWidget(buttons)

    def accept(self) -> None:
        self.store.set_setting(KV_ON, "on" if self.kv_on.isChecked() else "off")
        self.store.set_setting(KV_GIB, f"{self.kv_gib.value():g}")
        super().accept()
