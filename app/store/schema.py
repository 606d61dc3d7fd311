"""The chat database's tables, versioned with `PRAGMA user_version`.

Qt-free. A database written by a newer Tandem is refused before anything is
written to it (not even the journal mode), so that Tandem can still open it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

# Version 2's data step, also run on a read-only copy of a version-1 file:
# each message's parent is the one before it in its chat (a v1 chat is a
# line), and the chat's leaf is its last message.
BACKFILL_V2 = """
    UPDATE messages SET parent_id = (SELECT MAX(p.id) FROM messages p
                                     WHERE p.chat_id = messages.chat_id AND p.id < messages.id);
    UPDATE chats SET leaf_id = (SELECT MAX(id) FROM messages WHERE chat_id = chats.id);
"""

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
    # version 2: conversations are trees. A message's parent is the message it
    # answers or follows (NULL for a first message); an edit or a regenerate
    # adds a sibling, so nothing is deleted. The chat's leaf ends the path shown.
    """
    ALTER TABLE messages ADD COLUMN parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE;
    ALTER TABLE chats ADD COLUMN leaf_id INTEGER;
    CREATE INDEX messages_by_parent ON messages(chat_id, parent_id);
    """ + BACKFILL_V2,
    # version 3: a reasoning model's thinking, kept beside its answer (never
    # sent back to the model as part of the answer).
    """
    ALTER TABLE messages ADD COLUMN reasoning TEXT NOT NULL DEFAULT '';
    """,
    # version 4: tool turns (issue 36). A message's role may be 'tool' (a
    # tool's result); `tool` holds the call as JSON: an answer's calls
    # ({"calls": [...]}) or a result's call ({"id", "name", "arguments", ...}).
    # SQLite cannot change a CHECK: the table is rebuilt, its rows and ids
    # kept (migrate() turns foreign keys off around it, as SQLite's own
    # procedure for schema changes says).
    """
    CREATE TABLE messages_v4 (
        id INTEGER PRIMARY KEY,
        chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
        content TEXT NOT NULL,
        complete INTEGER NOT NULL DEFAULT 1,
        stats TEXT,
        created_at REAL NOT NULL,
        parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
        reasoning TEXT NOT NULL DEFAULT '',
        tool TEXT
    );
    INSERT INTO messages_v4 (id, chat_id, role, content, complete, stats, created_at,
                             parent_id, reasoning)
        SELECT id, chat_id, role, content, complete, stats, created_at, parent_id, reasoning
        FROM messages;
    DROP TABLE messages;
    ALTER TABLE messages_v4 RENAME TO messages;
    CREATE INDEX messages_by_chat ON messages(chat_id, id);
    CREATE INDEX messages_by_parent ON messages(chat_id, parent_id);
    """,
    # version 5: images in chats (issue 37). An image's bytes are kept once,
    # by the digest of its pixels (engine/images.py), with a small PNG
    # thumbnail; a message lists its images in its stats ({"images": [{digest,
    # name, width, height, format, size}]}). An image no message lists any
    # more is deleted with the last chat that had it (ChatStore.delete_chat).
    """
    CREATE TABLE images (
        digest TEXT PRIMARY KEY,
        format TEXT NOT NULL,
        width INTEGER NOT NULL,
        height INTEGER NOT NULL,
        data BLOB NOT NULL,
        thumb BLOB NOT NULL
    );
    """,
]

TABLES = ("chats", "messages", "settings", "open_tabs", "images")


class NewerSchemaError(RuntimeError):
    """The database was written by a newer Tandem; this one must not touch it."""

    def __init__(self, path: Path, version: int):
        self.path, self.version = path, version
        super().__init__(f"{path} was written by a newer Tandem (schema {version}); "
                         f"this one knows {len(MIGRATIONS)}.")


def schema_version(db: sqlite3.Connection) -> int:
    return db.execute("PRAGMA user_version").fetchone()[0]


def check_version(db: sqlite3.Connection, path: Path) -> None:
    version = schema_version(db)
    if version > len(MIGRATIONS):
        raise NewerSchemaError(path, version)


def migrate(db: sqlite3.Connection) -> None:
    """Bring the schema up to date, one committed step per version. Foreign
    keys are off while a step runs: a rebuilt table's DROP must not cascade
    (rows are copied with their ids, so no link changes; a link a damaged
    page lost stays as lost, and the file still opens)."""
    version = schema_version(db)
    if version >= len(MIGRATIONS):
        return
    keys = db.execute("PRAGMA foreign_keys").fetchone()[0]
    db.execute("PRAGMA foreign_keys = OFF")  # a no-op inside a transaction: set before
    try:
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            try:
                db.executescript(
                    f"BEGIN IMMEDIATE; {script}; PRAGMA user_version = {number}; COMMIT;")
            except sqlite3.Error:
                if db.in_transaction:  # a half-made step must not be committed later
                    db.execute("ROLLBACK")
                raise
    finally:
        db.execute(f"PRAGMA foreign_keys = {'ON' if keys else 'OFF'}")


def create_schema(db: sqlite3.Connection) -> None:
    """The current schema in an empty database (the in-memory read-only copy)."""
    for script in MIGRATIONS:
        db.executescript(script)
    db.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
