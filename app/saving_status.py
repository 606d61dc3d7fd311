"""What the user must know about saving, in the status bar: read-only, saving
delayed by a locked database (with how many changes wait), and the store's
notices from opening (a journal replayed, a file moved aside)."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QLabel, QStatusBar


class SavingStatus(QObject):
    # (changes waiting, why): emitted on the store's writer thread, shown on the GUI thread
    delayed = Signal(int, str)

    def __init__(self, store, status_bar: QStatusBar, parent: QObject | None = None):
        super().__init__(parent)
        self.store, self.status_bar = store, status_bar
        self.saving_label = QLabel("")
        self.saving_label.setStyleSheet("color: #8a5300;")
        self.saving_label.hide()
        status_bar.insertPermanentWidget(0, self.saving_label)
        self.read_only_label = QLabel("Read-only: new chats are not saved")
        self.read_only_label.setStyleSheet(
            "background: #fff3cd; color: #5c4400; padding: 1px 6px; border-radius: 3px;")
        self.read_only_label.setToolTip(f"Showing {store.path} without changing it.")
        self.read_only_label.setVisible(store.read_only)
        status_bar.insertPermanentWidget(0, self.read_only_label)
        self.delayed.connect(self._on_delayed)
        # Emitting from the writer's thread queues the call onto the GUI thread.
        store.on_pending = lambda count, why: self.delayed.emit(count, why or "")
        if store.pending:  # changes left from the last run, still locked out
            self._on_delayed(store.pending, store.pending_reason or "")
        if store.notices:
            status_bar.showMessage(" ".join(store.notices), 30_000)

    def detach(self) -> None:
        """The window is closing; the store may outlive it."""
        self.store.on_pending = None

    def _on_delayed(self, count: int, why: str) -> None:
        if count:
            changes = "1 change" if count == 1 else f"{count} changes"
            self.saving_label.setText(f"⚠ Saving is delayed: {why or 'the database is busy'} "
                                      f"({changes} waiting)")
            self.saving_label.setToolTip(f"They are kept in {self.store.journal_path} and "
                                         "written as soon as the database can be written.")
            self.saving_label.show()
        elif not self.saving_label.isHidden():
            self.saving_label.hide()
            self.status_bar.showMessage("All changes are saved.", 5_000)
