"""Opening the chat database at start-up, or saying clearly why it cannot be.

Qt-free. `open_store(path, choose)` asks `choose(problem)` what to do about a
database it cannot use (the app shows db_dialog.py; tests pass a function):
retry, open it read-only (history visible, nothing saved), start fresh (the
file is moved aside, never deleted) or quit. None of these writes to the
file: problems are found with a read-only probe before the real open, which
is the first thing that may write.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from .chats import ChatStore
from .journal import fallback_journal_path, journal_path
from .readonly import connect_read_only, writable
from .schema import MIGRATIONS, NewerSchemaError
from .writer import BUSY, describe

RETRY, WAIT, READ_ONLY, FRESH, QUIT = "retry", "wait", "read-only", "fresh", "quit"
SQLITE_HEADER = b"SQLite format 3\x00"


@dataclass(frozen=True)
class DatabaseProblem:
    kind: str  # locked, in-use, folder, unreadable, not-a-database, malformed, newer-schema,
    #            read-only-file, read-only-folder, cannot-create, cannot-open
    path: Path
    summary: str  # what is wrong, one sentence
    detail: str  # what it means and what the choices do here
    choices: tuple[str, ...]  # of RETRY, WAIT, READ_ONLY, FRESH, QUIT, in that order


def _problem(kind: str, path: Path, summary: str, detail: str, *choices: str) -> DatabaseProblem:
    if FRESH in choices and not writable(path.parent):
        choices = tuple(c for c in choices if c != FRESH)  # cannot move it aside there
    return DatabaseProblem(kind, path, summary, detail, (*choices, QUIT))


def diagnose(path: str | Path) -> DatabaseProblem | None:
    """What stops Tandem using the database at `path`, found without writing
    anything (None: open it). Reads the whole file once (`quick_check`)."""
    path = Path(path)
    if path.is_dir():
        return _problem("folder", path, "The chat database is a folder, not a file.",
                        "Something else uses this name.", RETRY, FRESH)
    if not path.exists():
        parent = next(p for p in path.parents if p.exists())
        if not writable(parent):
            return _problem("cannot-create", path, "The chat database cannot be created: "
                            f"{parent} is not writable.",
                            "Make the folder writable and choose Retry.",
                            RETRY, READ_ONLY)
        return None
    try:
        with open(path, "rb") as f:
            header = f.read(len(SQLITE_HEADER))
    except PermissionError:
        return _problem("unreadable", path, "The chat database cannot be read: permission "
                        "denied.", "Give your user access to the file and choose Retry.",
                        RETRY, FRESH)
    except OSError as e:
        return _problem("cannot-open", path, f"The chat database cannot be opened: "
                        f"{e.strerror or e}.", "Choose Retry once it is reachable.",
                        RETRY, FRESH)
    if header and header != SQLITE_HEADER:  # SQLite takes an empty file as a new database
        return _not_a_database(path)
    if header:
        try:
            db = connect_read_only(path)
        except sqlite3.Error as e:
            return problem_from_error(path, e, readable=False)
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > len(MIGRATIONS):
                return problem_from_error(path, NewerSchemaError(path, version))
            check = db.execute("PRAGMA quick_check").fetchall()
            if check != [("ok",)]:
                return _malformed(path, "; ".join(r[0] for r in check[:3]))
        except sqlite3.Error as e:
            return problem_from_error(path, e, readable=False)
        finally:
            db.close()
    if not writable(path.parent):
        return _read_only_folder(path)
    if not writable(path):
        return _read_only_file(path)
    return None


def problem_from_error(path: str | Path, error: BaseException,
                       readable: bool = True) -> DatabaseProblem:
    """The problem behind an error raised while opening `path` (`readable`:
    False when even reading it failed, so read-only is no way on)."""
    path = Path(path)
    name = getattr(error, "sqlite_errorname", "")
    if isinstance(error, NewerSchemaError):
        return _problem("newer-schema", path, "The chat database was written by a newer "
                        f"version of Tandem (schema {error.version}; this version knows "
                        f"{len(MIGRATIONS)}).",
                        "Tandem leaves it as it is, so that the newer version can still "
                        "open it.", READ_ONLY, FRESH)
    if isinstance(error, IsADirectoryError):
        return diagnose(path) or _unknown(path, error)
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        # Not "start fresh": the file is not damaged, and the other program
        # would go on writing to it wherever it was moved.
        return _problem("locked", path, "The chat database is locked by another program.",
                        f"SQLite says: {error}. Close the program that has it open (a "
                        "backup or sync tool, a database browser) and choose Retry.",
                        *((RETRY, READ_ONLY) if readable else (RETRY,)))
    if name == "SQLITE_NOTADB":
        return _not_a_database(path)
    if name.startswith("SQLITE_CORRUPT"):
        return _malformed(path, str(error))
    if name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM")) or isinstance(
            error, PermissionError):
        if path.exists() and not writable(path.parent):
            return _read_only_folder(path)
        if path.exists() and not writable(path):
            return _read_only_file(path)
    return _unknown(path, error)


def _write_locked(path: Path) -> DatabaseProblem:
    return _problem("locked", path, "The chat database is locked by another program.",
                    "It can be read but not written: another program is in the middle of "
                    "changing it (a backup or sync tool, a database browser). Close it and "
                    "choose Retry, or open Tandem now and its changes are saved once the "
                    "lock is gone.", RETRY, WAIT, READ_ONLY)


def _not_a_database(path: Path) -> DatabaseProblem:
    return _problem("not-a-database", path, "The chat database file is damaged: it does not "
                    "start like an SQLite database.",
                    "Its first bytes were overwritten, or another kind of file has its "
                    "name.", RETRY, FRESH)


def _malformed(path: Path, error: str) -> DatabaseProblem:
    return _problem("malformed", path, "The chat database is damaged (malformed).",
                    f"SQLite says: {error}. Part of the file was overwritten or cut "
                    "short (a disk, copy or sync problem); read-only shows what can still "
                    "be read.",
                    RETRY, READ_ONLY, FRESH)


def _read_only_file(path: Path) -> DatabaseProblem:
    return _problem("read-only-file", path, "The chat database file is read-only.",
                    "Tandem cannot save chats in it. Make it writable and choose Retry.",
                    RETRY, READ_ONLY, FRESH)


def _read_only_folder(path: Path) -> DatabaseProblem:
    return _problem("read-only-folder", path, f"The folder of the chat database "
                    f"({path.parent}) is read-only.",
                    "SQLite needs to create files beside the database to save in it. "
                    "Make the folder writable and choose Retry.", RETRY, READ_ONLY)


def _unknown(path: Path, error: BaseException) -> DatabaseProblem:
    return _problem("cannot-open", path, "The chat database cannot be opened.",
                    f"{type(error).__name__}: {error}", RETRY, READ_ONLY, FRESH)


def in_use_problem(path: str | Path) -> DatabaseProblem:
    """Another Tandem holds the database's lock file (app/ui/paths.py)."""
    return _problem("in-use", Path(path), "Another Tandem is already using this chat "
                    "database.", "Two copies writing the same chats would lose changes. "
                    "Switch to the other window, or quit it and choose Retry.", RETRY, READ_ONLY)


def aside_name(path: Path, kind: str, now: float | None = None) -> Path:
    label = {"newer-schema": "newer", "locked": "moved", "read-only-file": "moved",
             "in-use": "moved"}.get(kind, "damaged")
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    target, n = path.with_name(f"{path.name}.{label}-{stamp}"), 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.{label}-{stamp}-{n}")
    return target


def move_aside(path: str | Path, kind: str = "damaged") -> Path:
    """Rename the database and its companions (WAL, shared memory, rollback and
    pending journals) out of the way; nothing is deleted. Returns the new name."""
    path = Path(path)
    target = aside_name(path, kind)
    companions = [Path(f"{path}{s}") for s in ("-wal", "-shm", "-journal")] + [journal_path(path)]
    fallback = fallback_journal_path(path)  # in the cache folder: stays there, renamed
    os.rename(path, target)
    for companion in companions:
        if companion.exists():
            os.rename(companion, Path(f"{target}{companion.name[len(path.name):]}"))
    if fallback.exists():
        os.rename(fallback, fallback.with_name(f"{fallback.name}.{target.name}"))
    return target


def open_store(path: str | Path, choose) -> ChatStore | None:
    """The store for `path`, asking `choose(problem) -> RETRY | WAIT |
    READ_ONLY | FRESH | QUIT` until it can be opened; None if the user quits."""
    path = Path(path)
    notices: list[str] = []
    problem: DatabaseProblem | None = None  # one that a choice itself ran into
    while True:
        store = None
        if problem is None:
            problem = diagnose(path)
        if problem is None:
            try:
                store = ChatStore(path)
            except (sqlite3.Error, OSError, NewerSchemaError) as e:
                problem = problem_from_error(path, e)
            else:
                try:
                    store.check_writable()
                    break
                except sqlite3.Error as e:
                    if describe(e) == BUSY:
                        problem = _write_locked(path)  # it opens, but saving would wait
                    else:
                        store.close(timeout=0)
                        store, problem = None, problem_from_error(path, e)
        choice = choose(problem)
        if choice == WAIT and store is not None:
            break  # changes queue and are saved when the lock goes (store_writer.py)
        if store is not None:
            store.close(timeout=0)  # anything it replayed stays in its journal
        if choice not in problem.choices or choice == QUIT:
            return None
        if choice == READ_ONLY:
            try:
                store = ChatStore.open_read_only(path)
            except (sqlite3.Error, OSError) as e:
                problem = problem_from_error(path, e)
                continue
            break
        if choice == FRESH:
            try:
                moved = move_aside(path, problem.kind)
            except OSError as e:
                problem = _unknown(path, e)
                continue
            notices.append(f"The previous chat database was moved aside, not deleted: {moved}")
        problem = None  # RETRY, or FRESH done: look again
    store.notices[:0] = notices
    return store
