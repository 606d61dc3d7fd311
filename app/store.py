"""Chats, messages, per-answer stats, settings and open tabs in SQLite (WAL).

Qt-free. Every write commits at once, so a killed process loses at most what
it had not yet written (the window flushes a streaming answer every second).
The schema is versioned with `PRAGMA user_version` and migrated forward.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIGRATIONS = [
    # version 1
    """
    CREATE TABLE chats (
        id INTEGER PRIMARY KEY,
        title TEXT NOT NULL,
        system_prompt TEXT NOT NULL DEFAULT '',
        params TEXT NOT NULL DEFAULT '{}',
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system')),
        content TEXT NOT NULL,
        complete INTEGER NOT NULL DEFAULT 1,
        stats TEXT,
        created_at REAL NOT NULL
    );
    CREATE INDEX messages_by_chat ON messages(chat_id, id);
    CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE open_tabs (
        position INTEGER PRIMARY KEY,
        chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
        is_current INTEGER NOT NULL DEFAULT 0
    );
    """,
]


@dataclass(slots=True, frozen=True)
class Chat:
    id: int
    title: str
    system_prompt: str
    params: dict[str, Any]
    created_at: float
    updated_at: float


@dataclass(slots=True, frozen=True)
class Message:
    id: int
    chat_id: int
    role: str
    content: str
    complete: bool
    stats: dict[str, Any] | None
    created_at: float


class ChatStore:
    """The app's database. Use from one thread (the GUI thread)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._migrate()

    @property
    def schema_version(self) -> int:
        return self._db.execute("PRAGMA user_version").fetchone()[0]

    def _migrate(self) -> None:
        version = self.schema_version
        if version > len(MIGRATIONS):
            raise RuntimeError(f"{self.path} was written by a newer Tandem "
                               f"(schema {version}); this one knows {len(MIGRATIONS)}.")
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            with self._db:
                self._db.executescript(f"BEGIN; {script}; PRAGMA user_version = {number}; COMMIT;")

    def close(self) -> None:
        self._db.close()

    # ---- chats ------------------------------------------------------------
    def create_chat(self, title: str = "New chat", system_prompt: str = "",
                    params: dict[str, Any] | None = None) -> Chat:
        now = time.time()
        cur = self._db.execute(
            "INSERT INTO chats (title, system_prompt, params, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?)", (title, system_prompt, json.dumps(params or {}), now, now))
        return self.chat(cur.lastrowid)

    def chat(self, chat_id: int) -> Chat:
        row = self._db.execute("SELECT * FROM chats WHERE id = ?", (chat_id,)).fetchone()
        if row is None:
            raise KeyError(f"no chat {chat_id}")
        return _chat(row)

    def chats(self, search: str = "") -> list[Chat]:
        """Most recently updated first; `search` matches titles and message text."""
        if not search:
            rows = self._db.execute("SELECT * FROM chats ORDER BY updated_at DESC, id DESC")
        else:
            # The user's text is matched literally: % and _ are not wildcards.
            escaped = search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            like = f"%{escaped}%"
            rows = self._db.execute(
                "SELECT * FROM chats WHERE title LIKE ? ESCAPE '\\' OR id IN "
                "(SELECT chat_id FROM messages WHERE content LIKE ? ESCAPE '\\') "
                "ORDER BY updated_at DESC, id DESC", (like, like))
        return [_chat(r) for r in rows]

    def update_chat(self, chat_id: int, *, title: str | None = None,
                    system_prompt: str | None = None,
                    params: dict[str, Any] | None = None) -> Chat:
        chat = self.chat(chat_id)
        self._db.execute(
            "UPDATE chats SET title = ?, system_prompt = ?, params = ?, updated_at = ? "
            "WHERE id = ?",
            (title if title is not None else chat.title,
             system_prompt if system_prompt is not None else chat.system_prompt,
             json.dumps(params if params is not None else chat.params), time.time(), chat_id))
        return self.chat(chat_id)

    def delete_chat(self, chat_id: int) -> None:
        self._db.execute("DELETE FROM chats WHERE id = ?", (chat_id,))

    # ---- messages -----------------------------------------------------------
    def add_message(self, chat_id: int, role: str, content: str, complete: bool = True,
                    stats: dict[str, Any] | None = None) -> int:
        now = time.time()
        cur = self._db.execute(
            "INSERT INTO messages (chat_id, role, content, complete, stats, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (chat_id, role, content, int(complete), json.dumps(stats) if stats else None, now))
        self._db.execute("UPDATE chats SET updated_at = ? WHERE id = ?", (now, chat_id))
        return cur.lastrowid

    def update_message(self, message_id: int, content: str, complete: bool | None = None,
                       stats: dict[str, Any] | None = None) -> None:
        """Rewrite a message (a streaming answer's flush, or its final text)."""
        sets, args = ["content = ?"], [content]
        if complete is not None:
            sets.append("complete = ?")
            args.append(int(complete))
        if stats is not None:
            sets.append("stats = ?")
            args.append(json.dumps(stats))
        self._db.execute(f"UPDATE messages SET {', '.join(sets)} WHERE id = ?",
                         (*args, message_id))

    def delete_messages_from(self, message_id: int) -> None:
        """Drop a message and everything after it in its chat (edit, regenerate)."""
        row = self._db.execute("SELECT chat_id FROM messages WHERE id = ?",
                               (message_id,)).fetchone()
        if row is not None:
            self._db.execute("DELETE FROM messages WHERE chat_id = ? AND id >= ?",
                             (row["chat_id"], message_id))

    def messages(self, chat_id: int) -> list[Message]:
        rows = self._db.execute("SELECT * FROM messages WHERE chat_id = ? ORDER BY id",
                                (chat_id,))
        return [Message(r["id"], r["chat_id"], r["role"], r["content"], bool(r["complete"]),
                        json.loads(r["stats"]) if r["stats"] else None, r["created_at"])
                for r in rows]

    # ---- settings and tabs ----------------------------------------------------
    def setting(self, key: str, default: Any = None) -> Any:
        row = self._db.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return json.loads(row["value"]) if row else default

    def set_setting(self, key: str, value: Any) -> None:
        self._db.execute("INSERT INTO settings (key, value) VALUES (?, ?) "
                         "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                         (key, json.dumps(value)))

    def save_open_tabs(self, chat_ids: list[int], current: int | None) -> None:
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM open_tabs")
            self._db.executemany(
                "INSERT INTO open_tabs (position, chat_id, is_current) VALUES (?, ?, ?)",
                [(i, cid, int(cid == current)) for i, cid in enumerate(chat_ids)])
            self._db.execute("COMMIT")

    def open_tabs(self) -> tuple[list[int], int | None]:
        rows = list(self._db.execute("SELECT chat_id, is_current FROM open_tabs ORDER BY position"))
        current = next((r["chat_id"] for r in rows if r["is_current"]), None)
        return [r["chat_id"] for r in rows], current

    # ---- export ---------------------------------------------------------------
    def export_markdown(self, chat_id: int) -> str:
        chat = self.chat(chat_id)
        lines = [f"# {chat.title}", ""]
        if chat.system_prompt:
            lines += [f"> System: {chat.system_prompt}", ""]
        for m in self.messages(chat_id):
            who = {"user": "You", "assistant": "Assistant", "system": "System"}[m.role]
            lines += [f"## {who}", "", m.content, ""]
            if m.stats and m.stats.get("footer"):
                lines += [f"*{m.stats['footer']}*", ""]
        return "\n".join(lines).rstrip() + "\n"


def _chat(row: sqlite3.Row) -> Chat:
    return Chat(row["id"], row["title"], row["system_prompt"], json.loads(row["params"]),
                row["created_at"], row["updated_at"])
