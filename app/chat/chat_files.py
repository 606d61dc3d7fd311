"""Chats to and from files: Export as Markdown or JSON (every branch, the
thinking, the stats), Import a JSON chat (Tandem's own, or OpenAI-style
messages) as a new chat. The dialogs open in Documents (or home), never the
app's working directory. A large file is read and checked, then written and
read back, on worker threads (a 64 MiB chat takes ~0.5 s to parse, as long to
write): the window goes on meanwhile."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QStandardPaths, QTimer, Signal
from PySide6.QtWidgets import QFileDialog, QMessageBox

from app.conversation.history import history_of
from app.ui.paths import file_name_for
from app.store import bulk_write
from app.store.chat_json import ImportError_, check_size, export_chat, parse_chat, write_chat

KINDS = {"md": "Markdown (*.md)", "json": "JSON (*.json)"}


def documents() -> Path:
    return Path(QStandardPaths.writableLocation(QStandardPaths.DocumentsLocation)
                or str(Path.home()))


def write_export(store, chat_id: int, path: str | Path) -> Path:
    """The chat as Markdown, or as JSON when `path` ends in .json."""
    path = Path(path)
    text = (export_chat(store, chat_id) if path.suffix.lower() == ".json"
            else store.export_markdown(chat_id))
    path.write_text(text, encoding="utf-8")
    return path


def export_current(window, kind: str = "md") -> Path | None:
    tab = window.current_tab()
    if tab is None:
        return None
    where = documents() / f"{file_name_for(tab.title)}.{kind}"
    path, _ = QFileDialog.getSaveFileName(window, "Export chat", str(where), KINDS[kind])
    if not path:
        return None
    try:
        return write_export(window.store, tab.chat_id, path)
    except OSError as e:
        QMessageBox.warning(window, "Export chat", f"Could not write {path}:\n{e.strerror}")
        return None


def read_chat_file(path: str | Path) -> bytes:
    """The file's bytes, refused before reading when it is too large."""
    path = Path(path)
    check_size(path.stat().st_size)
    return path.read_bytes()


PARSE_HERE = 1 << 20  # a file this small parses on the GUI thread (~10 ms)


class ChatImporter(QObject):
    """Imports large chat files on worker threads: one parses the file; the
    GUI thread reserves the new chat's ids (ChatStore.reserve_ids); another
    worker writes the chat and reads its branch back on connections of its own
    (store/bulk_write.py); the GUI thread opens the tab from that History.
    `done(chat id or None)` says when an import has ended, opened or refused."""

    done = Signal(object)
    _parsed = Signal(object, object)  # (path, chat or exception), from the worker
    _written = Signal(object, object, object, int)  # (path, chat id, History/exception, count)

    def __init__(self, window):
        super().__init__(window)
        self.window = window
        self.running = 0
        self._notes: dict[Path, list[str]] = {}  # what an import left out (images), said once open
        self._parsed.connect(self._on_parsed)
        self._written.connect(self._on_written)

    def start(self, path: Path) -> None:
        self.running += 1
        self.window.statusBar().showMessage(f"Importing {path.name}…")
        threading.Thread(target=self._work, args=(path,), name="import-chat",
                         daemon=True).start()

    def _emit(self, signal, *args) -> None:
        try:
            signal.emit(*args)
        except RuntimeError:  # the window is gone
            pass

    def _work(self, path: Path) -> None:
        try:
            result: Any = parse_chat(read_chat_file(path))
        except Exception as e:
            result = e
        self._emit(self._parsed, path, result)

    def _on_parsed(self, path: Path, result) -> None:
        window = self.window
        if isinstance(result, Exception):
            self._refused(path, result)
            return
        self._notes[path] = result.get("notes") or []
        if window.store.is_closed:  # the window closed meanwhile: nothing is written
            self.running -= 1
            self.done.emit(None)
            return
        where = bulk_write.target(window.store)
        if where is None:  # a read-only store, or its own changes wait: written here
            self._opened(path, write_chat(window.store, result), len(result["messages"]))
            return
        chat_id, first = window.store.reserve_ids(len(result["messages"]))
        threading.Thread(target=self._write, args=(path, where, chat_id, first, result),
                         name="import-chat-write", daemon=True).start()

    def _write(self, path: Path, where, chat_id: int, first: int, parsed) -> None:
        """On a worker: the chat written, then its History read back; only
        this thread's own connections are used (the window may close meanwhile)."""
        result: Any = None
        try:
            bulk_write.write_chat(*where, chat_id, first, parsed)
        except bulk_write.NotWritten as e:
            result = e
        else:
            try:
                with bulk_write.no_collection():
                    result = history_of(*bulk_write.read_branch(*where, chat_id))
            except Exception as e:  # written, not read back: the tab reads it itself
                print(f"tandem: reading the imported chat back failed: {e!r}", file=sys.stderr)
        self._emit(self._written, path, chat_id, result, len(parsed["messages"]))

    def _on_written(self, path: Path, chat_id: int, result, count: int) -> None:
        if isinstance(result, Exception):
            self._refused(path, result)
            return
        if self.window.store.is_closed:
            self.running -= 1
            self.done.emit(chat_id)
            return
        if self.window.store.pending:
            # The store's own writes met this import's lock and wait: until they
            # are written its reads come from a copy without the new chat.
            QTimer.singleShot(50, self, lambda: self._on_written(path, chat_id, result, count))
            return
        self._opened(path, chat_id, count, result)

    def _refused(self, path: Path, e: Exception) -> None:
        self.running -= 1
        self._notes.pop(path, None)
        self.window.statusBar().clearMessage()
        _refuse(self.window, path, e)
        self.done.emit(None)

    def _opened(self, path: Path, chat_id: int, count: int, history=None) -> None:
        window = self.window
        window.sidebar.refresh()
        notes = " ".join(self._notes.pop(path, []))
        window.statusBar().showMessage(f"Imported {path.name}: {count:,} messages. {notes}",
                                       15_000 if notes else 5_000)
        # Opened a turn of the event loop later (a 1 ms timer: Qt runs a 0 ms
        # one before the timers that are due), so refreshing the list and
        # making the tab are two shorter stalls, not one long one.
        QTimer.singleShot(1, self, lambda: self._open(chat_id, history))

    def _open(self, chat_id: int, history) -> None:
        self.running -= 1
        # A tab the user opened meanwhile is brought forward (open_chat).
        self.window.open_chat(chat_id, history=history)
        self.done.emit(chat_id)


def importer(window) -> ChatImporter:
    """The window's importer (the window makes it: `window.importer`)."""
    return window.importer


def _refuse(window, path, e: Exception) -> None:
    if isinstance(e, bulk_write.NotWritten):
        why = f"It could not be written ({e})."
    elif isinstance(e, ImportError_):
        why = str(e)
    elif isinstance(e, OSError):
        why = f"It could not be read: {e.strerror}."
    else:  # a check this file slipped past: still a refusal, before anything is written
        why = f"It is not a chat Tandem can read ({type(e).__name__}: {str(e)[:80]})."
    QMessageBox.warning(window, "Import chat", f"{Path(path).name} was not imported.\n\n{why}")


def import_file(window, path: str | Path) -> int | None:
    """Import the chat in `path` as a new chat and open it; a file that is not
    one is refused with the reason, and nothing is written. A small file is
    imported at once (its new chat's id is returned); a larger one is read and
    checked on a worker thread while the window goes on (None is returned:
    `importer(window).done` gives the id, or None when it was refused)."""
    path = Path(path)
    try:
        small = path.stat().st_size <= PARSE_HERE
    except OSError:
        small = True  # refused below, with the reason
    if not small:
        importer(window).start(path)
        return None
    try:
        parsed = parse_chat(read_chat_file(path))
    except Exception as e:  # a file is outside data: whatever it does, refused
        _refuse(window, path, e)
        return None
    chat_id = write_chat(window.store, parsed)
    window.sidebar.refresh()
    window.open_chat(chat_id)
    if parsed.get("notes"):  # images it could not read
        window.statusBar().showMessage(f"Imported {path.name}. {' '.join(parsed['notes'])}",
                                       15_000)
    return chat_id


def import_chosen(window) -> int | None:
    path, _ = QFileDialog.getOpenFileName(window, "Import chat", str(documents()),
                                          "Chats (*.json)")
    return import_file(window, path) if path else None
