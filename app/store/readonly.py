"""Reading a chat database without changing anything on disk.

Qt-free. `connect_read_only` opens the file read-only (`mode=ro`), or as
immutable where SQLite would otherwise have to create files beside it that it
cannot (read-only folder) or should not (read-only file).
`read_only_copy` copies into memory whatever rows can be read: a damaged page
loses the rows on it, not the rest of the table (each table is read forwards
until the damage, then backwards up to it). The app then runs on the copy, so
new chats work for the session and are never saved.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

from .schema import BACKFILL_V2, TABLES, create_schema

OPEN_WAIT_S = 1.0


def writable(path: Path) -> bool:
    # The effective user is who SQLite writes as (it differs under sudo/setuid).
    effective = os.access in os.supports_effective_ids
    return os.access(path, os.W_OK, effective_ids=effective)


def connect_read_only(path: str | Path, timeout: float = OPEN_WAIT_S) -> sqlite3.Connection:
    path = Path(path)
    uri = f"file:{quote(str(path.resolve()))}"
    if not writable(path) and _wal_without_log(path):
        # SQLite would create its -wal and -shm with the file's own (read-only)
        # permissions, and they would keep the database read-only after the
        # user fixed the file. With no log there is nothing but the file to read.
        return sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=timeout,
                               isolation_level=None)
    try:
        db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=timeout, isolation_level=None)
        db.execute("PRAGMA user_version").fetchone()  # the open is lazy: fail here, not later
        return db
    except sqlite3.OperationalError as e:
        name = getattr(e, "sqlite_errorname", "")
        if not name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN")):
            raise
    # The folder is read-only: nobody can be writing the file through SQLite's
    # WAL index here, so reading it as immutable is safe.
    return sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=timeout, isolation_level=None)


def _wal_without_log(path: Path) -> bool:
    # Reads the header with a plain open(): closing it would drop any SQLite
    # locks this process holds on the file (POSIX), so only ever done on a file
    # this process cannot write, and so has no writing connection to.
    if Path(f"{path}-wal").exists():
        return False
    try:
        with open(path, "rb") as f:
            header = f.read(20)
    except OSError:
        return False
    return len(header) == 20 and header[18] == 2  # file format 2: WAL


def read_only_copy(path: str | Path) -> tuple[sqlite3.Connection, int]:
    """An in-memory database (current schema) holding what could be read from
    `path`, and how many of its tables had rows that could not be read."""
    memory = sqlite3.connect(":memory:", isolation_level=None)
    create_schema(memory)
    if not Path(path).exists():
        return memory, 0
    source = connect_read_only(path)
    lost = 0
    try:
        version = source.execute("PRAGMA user_version").fetchone()[0]
        for table in TABLES:
            there = {r[1] for r in source.execute(f"PRAGMA table_info({table})")}
            columns = ", ".join(r[1] for r in memory.execute(f"PRAGMA table_info({table})")
                                if r[1] in there)  # an older file lacks the newer columns
            if not columns:  # nor a newer table (images: schema 5)
                continue
            rows, damaged = _readable_rows(source, f"SELECT {columns} FROM {table}")
            marks = ", ".join("?" * len(columns.split(", ")))
            memory.executemany(f"INSERT OR IGNORE INTO {table} ({columns}) VALUES ({marks})", rows)
            lost += damaged
        if version < 2:  # a version-1 chat is a line: link it as migrating it would
            memory.executescript(BACKFILL_V2)
    finally:
        source.close()
    memory.execute("PRAGMA foreign_keys = ON")
    return memory, lost


def _readable_rows(source: sqlite3.Connection, select: str) -> tuple[list[tuple], int]:
    """Rows of `select` in rowid order, reading around one damaged stretch;
    the int is 1 when some were lost (how many cannot be known)."""
    forward: list[tuple] = []
    try:
        for row in source.execute(f"{select} ORDER BY rowid"):
            forward.append(tuple(row))
        return forward, 0
    except sqlite3.DatabaseError:
        pass
    backward: list[tuple] = []
    try:
        for row in source.execute(f"{select} ORDER BY rowid DESC"):
            backward.append(tuple(row))
    except sqlite3.DatabaseError:
        pass
    return forward + backward[::-1], 1
