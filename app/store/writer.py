"""Writes to the chat database that never block the GUI thread and are never dropped.

Qt-free. A change is a list of SQL statements written as one transaction. It
is tried at once on the caller's connection without any busy wait; if the
database is busy (another program holds its write lock) or earlier changes are
still waiting (their order must hold), it joins a FIFO that a background
thread writes, in order, retrying with exponential backoff until the lock goes
away. Waiting changes are also in the pending journal (journal.py), so
quitting or a crash does not lose them, and reads are answered from an
in-memory copy of the database with the waiting changes applied, so the app
reads back what it wrote. `on_pending(count, error)` (called from either
thread) says how many changes wait and why; (0, None) when all are written.

One lock serialises the queue, the copy, direct writes and the worker's
writes; the worker holds it only while a transaction runs (busy timeout 0, so
milliseconds) and sleeps its backoff outside it.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .journal import Op, PendingJournal

READ_WAIT_MS = 250  # reads: WAL readers are almost never busy, and then only briefly
RETRY = (0.05, 2.0)  # first and longest pause between tries of a waiting change
BUSY = "the database is locked by another program"
MOVED = "the database file was moved, replaced or deleted while Tandem ran"


class FileMoved(sqlite3.OperationalError):
    """The database path no longer names the file this store opened."""


def file_identity(path: Path | None) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`; None when there is none."""
    try:
        st = os.stat(path)
    except (OSError, TypeError):
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def is_transient(error: sqlite3.Error) -> bool:
    """Errors of the moment (locked, busy, disk full, read-only, I/O) are retried;
    a change that breaks a constraint would fail forever and is not."""
    return isinstance(error, sqlite3.OperationalError) or type(error) is sqlite3.DatabaseError


def describe(error: sqlite3.Error) -> str:
    """Why saving waits, in the user's words."""
    if isinstance(error, FileMoved):
        return MOVED
    name = getattr(error, "sqlite_errorname", "")
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return BUSY
    if name.startswith("SQLITE_FULL"):
        return "the disk is full"
    if name.startswith("SQLITE_READONLY"):
        return "the database file cannot be written"
    return str(error)


def run_transaction(db: sqlite3.Connection, ops: list[Op]) -> None:
    db.execute("BEGIN IMMEDIATE")
    try:
        for sql, args in ops:
            db.execute(sql, args)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


class StoreWriter:
    def __init__(self, db: sqlite3.Connection, journal: PendingJournal | None,
                 path: Path | None, retry: tuple[float, float] = RETRY):
        """`db`: the GUI thread's connection; `journal`/`path`: None for an
        in-memory database, whose writes cannot wait."""
        self._db, self._journal, self._path, self._retry = db, journal, path, retry
        self._identity = file_identity(path)  # writes go only to this very file
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # the worker: a change, or stop
        self._changed = threading.Condition(self._lock)  # waiters: the queue shrank
        self._queue: deque[tuple[int, list[Op]]] = deque()
        self._shadow: sqlite3.Connection | None = None
        self._error: str | None = None
        self._journal_failed = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.on_pending: Callable[[int, str | None], None] | None = None

    # ---- GUI thread -----------------------------------------------------------
    def write(self, ops: list[Op]) -> None:
        """Write `ops` as one transaction now, or queue them if the database is busy."""
        with self._lock:
            if not self._queue:
                try:
                    self._direct(ops, None)
                    return
                except sqlite3.Error as e:
                    if not is_transient(e) or self._journal is None:
                        raise
                    self._error = describe(e)
            seq = self._journal.next_seq()
            try:
                self._journal.append(seq, ops)
            except OSError as e:  # still queued in memory; rewritten at exit
                self._journal_failed = True
                print(f"tandem: cannot write {self._journal.path}: {e}", file=sys.stderr)
            self._enqueue([(seq, ops)])
            count, error = len(self._queue), self._error
        self._notify(count, error)

    def adopt(self, entries: list[tuple[int, list[Op]]]) -> None:
        """At open: the journal's changes from a previous run go first."""
        with self._lock:
            if entries:
                try:
                    self._direct([op for _, ops in entries for op in ops], entries[-1][0])
                    entries = []
                except sqlite3.Error as e:
                    if not is_transient(e):
                        raise
                    self._error = describe(e)
                    self._enqueue(entries)
            if not entries:
                self._journal.discard()
            count, error = len(self._queue), self._error
        if count:
            self._notify(count, error)

    def replay(self, read_marker: Callable[[], dict | None]) -> list[str]:
        """At open: the changes a previous run could not write go first (the
        journal's, up to the marker `read_marker` reads from the database).
        Returns what the user is told."""
        journal = self._journal
        if journal is None:  # an in-memory database: nothing was left
            return []
        try:
            entries = journal.load(read_marker())
            self.adopt(entries)
        except (OSError, ValueError, KeyError, TypeError, sqlite3.Error) as e:
            # They do not fit this database (or cannot be read): kept, not applied.
            kept = []
            for path in journal.existing():
                aside = path.with_name(
                    f"{path.name}.unapplied-{time.strftime('%Y%m%d-%H%M%S')}")
                try:
                    path.rename(aside)
                except OSError:
                    aside = path
                kept.append(str(aside))
            kept = ", ".join(kept) or journal.path
            journal.forget()
            return [f"Changes left from the last run could not be saved ({e}); "
                    f"they are kept in {kept}."]
        notices = []
        if journal.unreadable:
            notices.append("Changes left from the last run could not be read from "
                           f"{'; '.join(journal.unreadable)}: they are not saved.")
        if entries:
            notices.append(f"{len(entries)} changes left from the last run were saved."
                           if not self.pending else
                           f"{len(entries)} changes left from the last run are waiting "
                           f"to be saved.")
        return notices

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """The connection that sees every change made so far, written or waiting."""
        with self._lock:
            yield self._shadow if self._shadow is not None else self._db

    @property
    def pending(self) -> int:
        return len(self._queue)

    @property
    def journal(self) -> PendingJournal | None:
        return self._journal

    @property
    def in_memory_only(self) -> bool:
        """Some waiting changes could be written to no journal: they live in
        this process only (quitting now loses them)."""
        return self._journal_failed and bool(self._queue)

    @property
    def error(self) -> str | None:
        return self._error if self._queue else None

    def check_writable(self, wait: float) -> None:
        if self._journal is None:
            return  # in memory
        with self._lock:
            self._db.execute(f"PRAGMA busy_timeout = {int(wait * 1000)}")
            try:
                run_transaction(self._db, [])  # BEGIN IMMEDIATE; COMMIT: writes nothing
            finally:
                self._db.execute(f"PRAGMA busy_timeout = {READ_WAIT_MS}")

    def retry_now(self) -> None:
        """Try the waiting changes at once (the user freed space, say)."""
        with self._lock:
            self._wake.notify_all()

    def wait_until_saved(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._queue:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def close(self, timeout: float) -> int:
        """Wait up to `timeout` s for waiting changes, then stop; returns how many
        are left (they stay in the journal for the next start)."""
        self.wait_until_saved(timeout)
        with self._lock:
            self._stopping = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(5.0)
        with self._lock:
            left = list(self._queue)
            if left and self._journal_failed:
                try:
                    self._journal.rewrite(left)
                except OSError as e:
                    print(f"tandem: {len(left)} unsaved changes are lost: cannot write "
                          f"{self._journal.path}: {e}", file=sys.stderr)
            if self._shadow is not None:
                self._shadow.close()
                self._shadow = None
        return len(left)

    # ---- under the lock -----------------------------------------------------------
    def _check_identity(self) -> None:
        """Refuse to write when the path names another file now (moved away,
        replaced, deleted): a write there would go to the wrong file, or
        create an empty one, and the chats would seem saved."""
        if self._path is not None and file_identity(self._path) != self._identity:
            raise FileMoved(MOVED)

    def _direct(self, ops: list[Op], seq: int | None) -> None:
        self._check_identity()
        if seq is not None:
            ops = [*ops, self._journal.marker(seq)]
        self._db.execute("PRAGMA busy_timeout = 0")  # never wait on the GUI thread
        try:
            run_transaction(self._db, ops)
        finally:
            self._db.execute(f"PRAGMA busy_timeout = {READ_WAIT_MS}")

    def _enqueue(self, entries: list[tuple[int, list[Op]]]) -> None:
        self._queue.extend(entries)
        if self._shadow is None:
            self._shadow = self._copy()
            entries = list(self._queue)  # a new copy lacks every waiting change
        if self._shadow is not None:
            for _, ops in entries:
                try:
                    run_transaction(self._shadow, ops)
                except sqlite3.Error:
                    pass  # it fails the same way for real; the worker reports it
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="store-writer", daemon=True)
            self._thread.start()
        self._wake.notify_all()

    def _copy(self) -> sqlite3.Connection | None:
        """The database as written so far, in memory (reads while changes wait)."""
        try:
            shadow = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            self._db.backup(shadow)
        except sqlite3.Error as e:  # reads stay correct for everything written so far
            print(f"tandem: cannot copy the database while saving waits: {e}", file=sys.stderr)
            return None
        shadow.row_factory = sqlite3.Row
        shadow.execute("PRAGMA foreign_keys = ON")
        return shadow

    # ---- worker thread ---------------------------------------------------------------
    def _work(self) -> None:
        db: sqlite3.Connection | None = None
        pause = self._retry[0]
        while True:
            with self._lock:
                while not self._queue and not self._stopping:
                    self._wake.wait()
                if self._stopping:
                    break
                seq, ops = self._queue[0]
                failed = False
                try:
                    self._check_identity()
                    if db is None:
                        db = sqlite3.connect(self._path, isolation_level=None, timeout=0)
                        db.execute("PRAGMA foreign_keys = ON")  # as the GUI's connection
                        db.execute("PRAGMA synchronous = NORMAL")
                    run_transaction(db, [*ops, self._journal.marker(seq)])
                except sqlite3.Error as e:
                    if is_transient(e):
                        failed, self._error = True, describe(e)
                    else:  # retrying cannot help, and it would hold up every later change
                        self._queue.popleft()
                        print(f"tandem: a change could not be saved and was skipped: {e} "
                              f"({ops[0][0][:60]}…)", file=sys.stderr)
                else:
                    self._queue.popleft()
                    self._error = None
                if not self._queue:
                    self._drained()
                count, error = len(self._queue), self._error
                self._changed.notify_all()
            self._notify(count, error)
            if failed:
                with self._lock:
                    if not self._stopping:
                        self._wake.wait(pause)  # a new change or stop wakes it early
                pause = min(pause * 2, self._retry[1])
            else:
                pause = self._retry[0]
        if db is not None:
            db.close()

    def _drained(self) -> None:
        if self._shadow is not None:
            self._shadow.close()
            self._shadow = None
        try:
            self._journal.discard()
        except OSError as e:
            print(f"tandem: cannot remove {self._journal.path}: {e}", file=sys.stderr)
        self._journal_failed = False

    def _notify(self, count: int, error: str | None) -> None:
        if self.on_pending is not None:
            try:
                self.on_pending(count, error)
            except Exception as e:  # a closed window must not stop the writer
                print(f"tandem: pending-writes listener failed: {e!r}", file=sys.stderr)
