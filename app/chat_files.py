"""Chats to and from files: Export as Markdown or JSON (every branch, the
thinking, the stats), Import a JSON chat (Tandem's own, or OpenAI-style
messages) as a new chat. The dialogs open in Documents (or home), never the
app's working directory."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QStandardPaths
from PySide6.QtWidgets import QFileDialog, QMessageBox

from .paths import file_name_for
from .store.chat_json import ImportError_, check_size, export_chat, parse_chat, write_chat

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


def import_file(window, path: str | Path) -> int | None:
    """Import the chat in `path` as a new chat and open it; a file that is not
    one is refused with the reason, and nothing is written."""
    try:
        parsed = parse_chat(read_chat_file(path))
    except Exception as e:  # a file is outside data: whatever it does, refused
        if isinstance(e, ImportError_):
            why = str(e)
        elif isinstance(e, OSError):
            why = f"It could not be read: {e.strerror}."
        else:  # a check this file slipped past: still a refusal, before anything is written
            why = f"It is not a chat Tandem can read ({type(e).__name__}: {str(e)[:80]})."
        QMessageBox.warning(window, "Import chat", f"{Path(path).name} was not imported.\n\n{why}")
        return None
    chat_id = write_chat(window.store, parsed)
    window.sidebar.refresh()
    window.open_chat(chat_id)
    return chat_id


def import_chosen(window) -> int | None:
    path, _ = QFileDialog.getOpenFileName(window, "Import chat", str(documents()),
                                          "Chats (*.json)")
    return import_file(window, path) if path else None
