"""A large imported chat written, and read back, off the GUI thread (issue 30).

Qt-free. ChatStore's connection belongs to the GUI thread, and inserting a
100,000-message chat on it took 0.56 s, reading it back 0.8 s. Here a worker
thread uses connections of its own to the same file: the ids were reserved on
the GUI thread first (`ChatStore.reserve_ids`), so nothing the store writes
meanwhile can take them, and the chat is written in one transaction (all of it
or nothing). The file must be the very one the store opened (device and inode,
as the store's writer checks); a locked database waits `BUSY_TIMEOUT_MS`, then
the write is refused (`NotWritten`, with the reason in the user's words).
"""

from __future__ import annotations

import gc
import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .branch import branch_and_versions
from .records import Message, message_of
from .images import INSERT as INSERT_IMAGE, image_row
from .writer import MOVED, describe, file_identity

BUSY_TIMEOUT_MS = 5000  # another program's write lock: waited for this long, then refused

Identity = tuple[int, int]


class NotWritten(Exception):
    """The chat was not written (nothing of it is in the database); says why."""


def target(store) -> tuple[Path, Identity] | None:
    """The store's file and its (device, inode) as opened, when a second
    connection may write to it: not for an in-memory (read-only) store, nor
    while the store's own changes wait (its reads then come from a copy that
    would not show a chat written here)."""
    writer = store._writer
    identity = writer._identity
    if store.read_only or identity is None or writer.pending:
        return None
    return store.path, identity


def _connect(path: Path, identity: Identity, uri: str | None = None) -> sqlite3.Connection:
    db = sqlite3.connect(uri or path, uri=uri is not None, isolation_level=None,
                         timeout=BUSY_TIMEOUT_MS / 1000)
    try:
        db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_MS)}")
        if file_identity(path) != identity:
            raise NotWritten(MOVED)
    except BaseException:
        db.close()
        raise
    return db


def write_chat(path: Path, identity: Identity, chat_id: int, first_id: int,
               parsed: dict[str, Any]) -> None:
    """parse_chat's checked chat as chat `chat_id`, its messages renumbered
    from `first_id` in file order (parents first, as ChatStore.add_tree does),
    in one transaction. Raises NotWritten, having written nothing."""
    now = time.time()
    messages = parsed["messages"]
    new_id = {m["id"]: first_id + i for i, m in enumerate(messages)}
    db = None
    try:
        db = _connect(path, identity)
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("PRAGMA synchronous = NORMAL")
        if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            raise NotWritten("the database is not in WAL mode")
        db.execute("BEGIN IMMEDIATE")
        db.executemany(INSERT_IMAGE, (image_row(i) for i in parsed.get("images") or ()))
        db.execute("INSERT INTO chats (id, title, system_prompt, params, created_at, "
                   "updated_at, leaf_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (chat_id, parsed["title"], parsed["system_prompt"],
                    json.dumps(dict(parsed["params"])), now, now, new_id.get(parsed["leaf"])))
        db.executemany(
            "INSERT INTO messages (id, chat_id, role, content, complete, stats, created_at, "
            "parent_id, reasoning, tool) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ((new_id[m["id"]], chat_id, m["role"], m["content"], int(m["complete"]),
              json.dumps(m["stats"]) if m["stats"] else None, now,
              new_id[m["parent"]] if m["parent"] is not None else None, m["reasoning"],
              json.dumps(m["tool"], ensure_ascii=False) if m.get("tool") else None)
             for m in messages))
        db.execute("COMMIT")
    except (sqlite3.Error, OSError) as e:
        if db is not None and db.in_transaction:
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # closing the connection rolls back too
        why = describe(e) if isinstance(e, sqlite3.Error) else (e.strerror or str(e))
        raise NotWritten(why) from e
    finally:
        if db is not None:
            db.close()


@contextmanager
def no_collection() -> Iterator[None]:
    """The cyclic garbage collector paused while a worker makes a long
    chat's objects (rows, Messages, the History's dicts: none in cycles).
    Otherwise the collections their growing number sets off run on the
    worker holding the GIL: 80-110 ms freezes of the GUI thread each, five
    while reading a 100,000-message chat (2-core VM), and the read took 2x as long."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_branch(path: Path, identity: Identity,
                chat_id: int) -> tuple[list[Message], dict[int, list[int]]]:
    """ChatStore.branch, on a read-only connection of this thread's own."""
    db = _connect(path, identity, Path(path).resolve().as_uri() + "?mode=ro")
    try:
        db.row_factory = sqlite3.Row
        rows, versions = branch_and_versions(
            lambda sql, args=(): db.execute(sql, args).fetchall(), chat_id)
        return [message_of(r) for r in rows], versions
    finally:
        db.close()
