"""Chats, messages, per-answer stats, settings and open tabs in SQLite (WAL).

Qt-free. A write commits at once when it can, so a killed process loses at
most what it had not yet written (the window flushes a streaming answer every
second). When another program holds the database's lock, writes never wait:
they queue and are written in order when the lock goes away, kept meanwhile
in a journal beside the database and visible to reads (writer.py, which at
open also writes what a previous run left).

One Tandem process per database (the app holds a lock file, app/ui/paths.py):
row ids are allocated here, in memory (max + 1 at open), so a write can
return its id before it reaches the disk. A second writer would collide.

`ChatStore.open_read_only` runs on an in-memory copy of what can be read
(readonly.py): new chats work for the session and are never saved.
The schema is versioned and migrated forward (schema.py). Rows are read into
plain records (records.py); a chat's Markdown export is markdown_export.py.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .journal import MARKER_KEY, Op, PendingJournal, journal_path
from .images import FORGET_UNUSED, image_ops
from .markdown_export import chat_markdown
from .branch import branch_and_versions, read_branch
from .tree import Links, newest_below, versions_of
from .readonly import OPEN_WAIT_S, read_only_copy
from .records import Chat, Message, chat_of, json_cell, message_of
from .schema import MIGRATIONS, check_version, migrate, schema_version
from .writer import READ_WAIT_MS, RETRY, StoreWriter

__all__ = ["MIGRATIONS", "Chat", "ChatStore", "Message"]

LEAF = object()  # add_message's default parent: the end of the chat's shown path


class ChatStore:
    """The app's database. Use from one thread (the GUI thread)."""

    read_only = False

    def __init__(self, path: str | Path, *, retry: tuple[float, float] = RETRY):
        """Open (creating and migrating if needed) the database at `path`.
        Raises sqlite3.Error / OSError / NewerSchemaError if it cannot be used;
        app/store/db_open.py turns those into something the user can act on."""
        self.path = Path(path)
        self.notices: list[str] = []  # for the user: what happened at open
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, isolation_level=None, timeout=OPEN_WAIT_S)
        try:
            db.row_factory = sqlite3.Row
            check_version(db, self.path)  # before anything writes to a newer file
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
            migrate(db)
            db.execute(f"PRAGMA busy_timeout = {READ_WAIT_MS}")
        except BaseException:
            db.close()
            raise
        journal = PendingJournal(self.path)
        self._start(db, StoreWriter(db, journal, self.path, retry))
        self.notices += self._writer.replay(lambda: self.setting(MARKER_KEY))
        self._next_ids()

    @classmethod
    def open_read_only(cls, path: str | Path) -> ChatStore:
        """The chats at `path` for this session only: nothing is ever written to
        it (not even its pending journal is replayed)."""
        store = cls.__new__(cls)
        store.path = Path(path)
        store.notices = []
        store.read_only = True
        memory, damaged = read_only_copy(store.path)
        memory.row_factory = sqlite3.Row
        if damaged:
            store.notices.append("Some messages could not be read from the damaged database.")
        store._start(memory, StoreWriter(memory, None, None))
        store._next_ids()
        return store

    def _start(self, db: sqlite3.Connection, writer: StoreWriter) -> None:
        self._db, self._writer, self._closed = db, writer, False

    def _next_ids(self) -> None:
        with self._writer.reading() as db:
            self._next_chat = db.execute("SELECT COALESCE(MAX(id), 0) FROM chats").fetchone()[0] + 1
            self._next_message = db.execute(
                "SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0] + 1

    def _read(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._writer.reading() as db:
            return db.execute(sql, args).fetchall()

    def _write(self, ops: list[Op]) -> None:
        self._writer.write(ops)

    @property
    def schema_version(self) -> int:
        with self._writer.reading() as db:
            return schema_version(db)

    # ---- saving ---------------------------------------------------------------
    @property
    def on_pending(self) -> Callable[[int, str | None], None] | None:
        """Called with (changes waiting, why) whenever that changes, from the
        GUI thread or the writer's thread; (0, None) once all are written."""
        return self._writer.on_pending

    @on_pending.setter
    def on_pending(self, listener: Callable[[int, str | None], None] | None) -> None:
        self._writer.on_pending = listener

    @property
    def pending(self) -> int:
        """Changes waiting to be written (the database was locked)."""
        return self._writer.pending

    @property
    def pending_reason(self) -> str | None:
        """Why changes wait (the last error writing them), or None."""
        return self._writer.error

    @property
    def journal_path(self) -> Path:
        return journal_path(self.path)

    @property
    def journal_files(self) -> list[Path]:
        """Where waiting changes are kept now (beside the database, or in the
        cache folder when that could not be written)."""
        journal = self._writer.journal
        return journal.existing() if journal is not None else []

    @property
    def kept_in_memory_only(self) -> bool:
        """Some waiting changes are in no journal: only this process has them."""
        return self._writer.in_memory_only

    def retry_now(self) -> None:
        self._writer.retry_now()

    def wait_until_saved(self, timeout: float) -> bool:
        return self._writer.wait_until_saved(timeout)

    def check_writable(self, wait: float = OPEN_WAIT_S) -> None:
        """Raise the sqlite3 error that writing would meet now (another program
        holding the write lock for `wait` s: SQLITE_BUSY). Asked once, at start."""
        self._writer.check_writable(wait)

    @property
    def is_closed(self) -> bool:
        return self._closed

    def close(self, timeout: float = 3.0) -> int:
        """Give waiting changes up to `timeout` s, then close. Returns how many
        are still unwritten: they are kept in `journal_path` for the next start."""
        if self._closed:
            return 0
        self._closed = True
        left = self._writer.close(timeout)
        self._db.close()
        return left

    # ---- chats ------------------------------------------------------------
    def create_chat(self, title: str = "New chat", system_prompt: str = "",
                    params: dict[str, Any] | None = None) -> Chat:
        now = time.time()
        chat = Chat(self._next_chat, title, system_prompt, dict(params or {}), now, now)
        self._next_chat += 1
        self._write([("INSERT INTO chats (id, title, system_prompt, params, created_at, "
                      "updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                      (chat.id, title, system_prompt, json.dumps(chat.params), now, now))])
        return chat

    def chat(self, chat_id: int) -> Chat:
        rows = self._read("SELECT * FROM chats WHERE id = ?", (chat_id,))
        if not rows:
            raise KeyError(f"no chat {chat_id}")
        return chat_of(rows[0])

    def chats(self, search: str = "") -> list[Chat]:
        """Most recently updated first; `search` matches titles and message text."""
        if not search:
            rows = self._read("SELECT * FROM chats ORDER BY updated_at DESC, id DESC")
        else:
            # The user's text is matched literally: % and _ are not wildcards.
            escaped = search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            like = f"%{escaped}%"
            rows = self._read(
                "SELECT * FROM chats WHERE title LIKE ? ESCAPE '\\' OR id IN "
                "(SELECT chat_id FROM messages WHERE content LIKE ? ESCAPE '\\') "
                "ORDER BY updated_at DESC, id DESC", (like, like))
        return [chat_of(r) for r in rows]

    def update_chat(self, chat_id: int, *, title: str | None = None,
                    system_prompt: str | None = None,
                    params: dict[str, Any] | None = None) -> Chat:
        old = self.chat(chat_id)
        chat = Chat(chat_id, title if title is not None else old.title,
                    system_prompt if system_prompt is not None else old.system_prompt,
                    dict(params) if params is not None else old.params, old.created_at,
                    time.time())
        self._write([("UPDATE chats SET title = ?, system_prompt = ?, params = ?, "
                      "updated_at = ? WHERE id = ?",
                      (chat.title, chat.system_prompt, json.dumps(chat.params),
                       chat.updated_at, chat_id))])
        return chat

    def delete_chat(self, chat_id: int) -> None:
        """The chat and its messages; its images unless another chat has them."""
        self._write([("DELETE FROM chats WHERE id = ?", (chat_id,)), (FORGET_UNUSED, ())])

    # ---- messages -----------------------------------------------------------
    # A chat is a tree: a message's parent is the one it follows, an edited
    # question or a regenerated answer is a sibling of the one it replaces,
    # and the chat's leaf ends the path shown (schema version 2). Nothing is
    # deleted by an edit or a regenerate.
    def add_message(self, chat_id: int, role: str, content: str, complete: bool = True,
                    stats: dict[str, Any] | None = None, parent_id: Any = LEAF,
                    tool: dict[str, Any] | None = None, images: list | None = None) -> int:
        """Add a message after `parent_id` (by default the end of the shown
        path; None: a new first message) and show its path. `images`: the
        images its stats list (ImageFile: app/conversation/chat_images.py),
        kept once each, in the same transaction."""
        now = time.time()
        message_id = self._next_message
        self._next_message += 1
        # The end of the shown path is looked up when the write runs (in
        # order with the writes before it), so adding never has to read.
        parent = ("(SELECT COALESCE(leaf_id, (SELECT MAX(id) FROM messages WHERE chat_id = ?)) "
                  "FROM chats WHERE id = ?)", (chat_id, chat_id)) if parent_id is LEAF \
            else ("?", (parent_id,))
        self._write(image_ops(images) + [
            ("INSERT INTO messages (id, chat_id, role, content, complete, stats, created_at, "
             f"tool, parent_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, {parent[0]})",
             (message_id, chat_id, role, content, int(complete),
              json.dumps(stats) if stats else None, now, json_cell(tool), *parent[1])),
            ("UPDATE chats SET updated_at = ?, leaf_id = ? WHERE id = ?",
             (now, message_id, chat_id))])
        return message_id

    def update_message(self, message_id: int, content: str, complete: bool | None = None,
                       stats: dict[str, Any] | None = None,
                       reasoning: str | None = None,
                       tool: dict[str, Any] | None = None) -> None:
        """Rewrite a message (a streaming answer's flush, or its final text;
        `tool`: the calls an answer made, or a tool result's call)."""
        sets, args = ["content = ?"], [content]
        if tool is not None:
            sets.append("tool = ?")
            args.append(json_cell(tool))
        if reasoning is not None:
            sets.append("reasoning = ?")
            args.append(reasoning)
        if complete is not None:
            sets.append("complete = ?")
            args.append(int(complete))
        if stats is not None:
            sets.append("stats = ?")
            args.append(json.dumps(stats))
        self._write([(f"UPDATE messages SET {', '.join(sets)} WHERE id = ?",
                      (*args, message_id))])

    def add_tree(self, chat_id: int, messages: list[dict], leaf: int,
                 images: list | None = None) -> dict[int, int]:
        """Add messages ({id, parent, role, content, reasoning, complete,
        stats, tool}; parents first) and the `images` their stats list in one
        transaction, renumbered; the branch ending at `leaf` is shown.
        Returns the old id -> new id map."""
        now = time.time()
        new_id: dict[int, int] = {}
        ops = image_ops(images)
        for m in messages:
            new_id[m["id"]] = message_id = self._next_message
            self._next_message += 1
            ops.append(("INSERT INTO messages (id, chat_id, role, content, complete, stats, "
                        "created_at, parent_id, reasoning, tool) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (message_id, chat_id, m["role"], m["content"], int(m["complete"]),
                         json.dumps(m["stats"]) if m["stats"] else None, now,
                         new_id[m["parent"]] if m["parent"] is not None else None,
                         m["reasoning"], json_cell(m.get("tool")))))
        ops.append(("UPDATE chats SET updated_at = ?, leaf_id = ? WHERE id = ?",
                    (now, new_id.get(leaf), chat_id)))
        self._write(ops)
        return new_id

    def reserve_ids(self, messages: int) -> tuple[int, int]:
        """(chat id, first of `messages` message ids) for a chat written on
        another connection (store/bulk_write.py); never given out again."""
        ids = self._next_chat, self._next_message
        self._next_chat, self._next_message = ids[0] + 1, ids[1] + messages
        return ids

    def leaf(self, chat_id: int) -> int | None:
        """The last message of the chat's shown path (None: no messages)."""
        rows = self._read("SELECT COALESCE(leaf_id, (SELECT MAX(id) FROM messages WHERE "
                          "chat_id = chats.id)) AS leaf FROM chats WHERE id = ?", (chat_id,))
        return rows[0]["leaf"] if rows else None

    def messages(self, chat_id: int) -> list[Message]:
        """The shown path, first message first (one branch of the tree; where
        a parent was lost on a damaged page, see store/tree.py)."""
        return [message_of(r) for r in read_branch(self._read, chat_id)[0]]

    def branch(self, chat_id: int) -> tuple[list[Message], dict[int, list[int]]]:
        """`messages` and `versions` together, from one read (store/branch.py)."""
        rows, versions = branch_and_versions(self._read, chat_id)
        return [message_of(r) for r in rows], versions

    def _links(self, chat_id: int) -> Links:
        return {r["id"]: r["parent_id"] for r in self._read(
            "SELECT id, parent_id FROM messages WHERE chat_id = ?", (chat_id,))}

    def all_messages(self, chat_id: int) -> list[Message]:
        """Every message of every branch, oldest first."""
        return [message_of(r) for r in self._read(
            "SELECT * FROM messages WHERE chat_id = ? ORDER BY id", (chat_id,))]

    def versions(self, chat_id: int) -> dict[int, list[int]]:
        """For each message with other versions: its versions' ids (itself
        included), oldest first."""
        return versions_of(self._links(chat_id))

    def show_version(self, message_id: int) -> None:
        """Show the path through `message_id`: below it, the newest branch."""
        rows = self._read("SELECT chat_id FROM messages WHERE id = ?", (message_id,))
        if not rows:
            raise KeyError(f"no message {message_id}")
        chat_id = rows[0]["chat_id"]
        leaf = newest_below(self._links(chat_id), message_id)
        self._write([("UPDATE chats SET leaf_id = ? WHERE id = ?", (leaf, chat_id))])

    # ---- images (schema 5) ---------------------------------------------------------
    def image_data(self, digest: str) -> bytes | None:
        """An image's bytes as attached (None: not kept)."""
        rows = self._read("SELECT data FROM images WHERE digest = ?", (digest,))
        return bytes(rows[0]["data"]) if rows else None

    def thumbnail(self, digest: str) -> bytes | None:
        """An image's thumbnail (a PNG; None: not kept)."""
        rows = self._read("SELECT thumb FROM images WHERE digest = ?", (digest,))
        return bytes(rows[0]["thumb"]) if rows else None

    # ---- settings and tabs ----------------------------------------------------
    def setting(self, key: str, default: Any = None) -> Any:
        rows = self._read("SELECT value FROM settings WHERE key = ?", (key,))
        return json.loads(rows[0]["value"]) if rows else default

    def set_setting(self, key: str, value: Any) -> None:
        self._write([("INSERT INTO settings (key, value) VALUES (?, ?) "
                      "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                      (key, json.dumps(value)))])

    def save_open_tabs(self, chat_ids: list[int], current: int | None) -> None:
        self._write([("DELETE FROM open_tabs", ())] + [
            ("INSERT INTO open_tabs (position, chat_id, is_current) VALUES (?, ?, ?)",
             (i, cid, int(cid == current))) for i, cid in enumerate(chat_ids)])

    def open_tabs(self) -> tuple[list[int], int | None]:
        rows = self._read("SELECT chat_id, is_current FROM open_tabs ORDER BY position")
        current = next((r["chat_id"] for r in rows if r["is_current"]), None)
        return [r["chat_id"] for r in rows], current

    # ---- export ---------------------------------------------------------------
    def export_markdown(self, chat_id: int) -> str:
        return chat_markdown(self.chat(chat_id), self.messages(chat_id))
