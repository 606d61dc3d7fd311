"""What the user must know about saving: read-only, saving delayed (by a
locked database, with how many changes wait), and, when the database cannot
be written at all (a full disk, a file moved or replaced, no rights), a
dialog at once: the changes are kept (where, or in memory only), Tandem
keeps trying, and the chats can be exported elsewhere. Quitting with changes
not yet saved asks first. Also the store's notices from opening."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QLabel, QMessageBox, QStatusBar

from app.ui.paths import file_name_for
from app.store.writer import BUSY

RETRY_NOW, EXPORT, QUIT, CANCEL = "Retry now", "Export chats…", "Quit anyway", "Cancel"


def export_all(store, folder: str | Path) -> list[Path]:
    """Every chat as Markdown in `folder` (one file each; what is waiting to
    be saved included)."""
    folder = Path(folder)
    written = []
    for chat in store.chats():
        path = folder / f"{chat.id:04d} {file_name_for(chat.title)}.md"
        path.write_text(store.export_markdown(chat.id), encoding="utf-8")
        written.append(path)
    return written


def ask(parent, title: str, text: str, buttons: list[str]) -> str:
    """A modal question with `buttons`; the one pressed (tests replace this)."""
    box = QMessageBox(QMessageBox.Warning, title, text, parent=parent)
    made = {box.addButton(label, QMessageBox.AcceptRole if label in (QUIT, RETRY_NOW)
                          else QMessageBox.RejectRole if label == CANCEL
                          else QMessageBox.ActionRole): label for label in buttons}
    box.exec()
    return made.get(box.clickedButton(), CANCEL)


class SavingStatus(QObject):
    # (changes waiting, why): emitted on the store's writer thread, shown on the GUI thread
    delayed = Signal(int, str)

    def __init__(self, store, status_bar: QStatusBar, parent: QObject | None = None):
        super().__init__(parent)
        self.store, self.status_bar = store, status_bar
        self.problem_box: QMessageBox | None = None  # shown once per failure
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

    def where_kept(self) -> str:
        """Where the waiting changes are, in words."""
        if self.store.kept_in_memory_only:
            return "only in Tandem's memory (no journal could be written): quitting loses them"
        files = self.store.journal_files
        return ("in " + " and ".join(str(f) for f in files)) if files else "in memory"

    def confirm_quit(self, parent) -> bool:
        """False when the user keeps Tandem open: asked only when changes are
        not saved yet (they would be saved at the next start, or lost)."""
        if self.store.read_only or not self.store.pending or \
                self.store.wait_until_saved(0.5):
            return True
        count, why = self.store.pending, self.store.pending_reason or "the database is busy"
        later = ("Tandem saves them at its next start." if not self.store.kept_in_memory_only
                 else "Export the chats first to keep them.")
        while True:
            choice = ask(parent, "Changes not saved",
                         f"{count} changes are not saved yet: {why}. They are kept "
                         f"{self.where_kept()}. {later}\n\nQuit anyway?",
                         [QUIT, EXPORT, CANCEL])
            if choice != EXPORT:
                return choice == QUIT
            self.export(parent)

    @staticmethod
    def confirm_busy(parent, streaming: int, serving: bool) -> bool:
        """False when the user keeps Tandem open: asked when answers are being
        written or the local server runs (quitting stops both)."""
        busy = ([f"{streaming} answer{'s are' if streaming > 1 else ' is'} still being "
                 "written (what is written so far is kept, with Continue)"] if streaming else []) \
            + (["the local server is running (its clients lose their answers)"] if serving else [])
        if not busy:
            return True
        return ask(parent, "Quit Tandem?", "; ".join(busy).capitalize() + ".\n\nQuit anyway?",
                   [QUIT, CANCEL]) == QUIT

    def export(self, parent) -> list[Path]:
        folder = QFileDialog.getExistingDirectory(parent, "Export every chat as Markdown to…")
        if not folder:
            return []
        try:
            written = export_all(self.store, folder)
        except OSError as e:
            self.status_bar.showMessage(f"Could not export the chats to {folder}: {e}", 30_000)
            return []
        self.status_bar.showMessage(f"{len(written)} chats exported to {folder}.", 15_000)
        return written

    def _on_delayed(self, count: int, why: str) -> None:
        if count:
            changes = "1 change" if count == 1 else f"{count} changes"
            memory = " — in memory only!" if self.store.kept_in_memory_only else ""
            self.saving_label.setText(f"⚠ Saving is delayed: {why or 'the database is busy'} "
                                      f"({changes} waiting{memory})")
            self.saving_label.setToolTip(f"They are kept {self.where_kept()} and written as "
                                         "soon as the database can be written.")
            self.saving_label.show()
            if why and why != BUSY:
                self._tell(count, why)
        else:
            if not self.saving_label.isHidden():
                self.saving_label.hide()
                self.status_bar.showMessage("All changes are saved.", 5_000)
            if self.problem_box is not None:
                self.problem_box.close()
                self.problem_box = None

    def _tell(self, count: int, why: str) -> None:
        """The database cannot be written (not merely busy): say so at once,
        in a dialog that does not stop the chats."""
        text = (f"Tandem cannot save your chats: {why}.\n\n{count} changes are waiting; "
                f"they are kept {self.where_kept()}. Tandem keeps trying, and writes them "
                f"as soon as it can.")
        if self.problem_box is not None:
            self.problem_box.setText(text)
            return
        box = QMessageBox(QMessageBox.Warning, "Chats are not being saved", text,
                          parent=self.status_bar.window())
        retry, export = box.addButton(RETRY_NOW, QMessageBox.ActionRole), \
            box.addButton(EXPORT, QMessageBox.ActionRole)
        box.addButton(QMessageBox.Ok)
        box.setModal(False)
        retry.clicked.connect(self.store.retry_now)
        export.clicked.connect(lambda: self.export(self.status_bar.window()))
        self.problem_box = box
        box.show()
