"""Changes the database could not take yet, kept on disk beside it
(`tandem.db-pending.jsonl`), or in the user's cache folder when that cannot be
written (a full disk, a folder gone), so that quitting or a crash does not
lose them.

Qt-free. One JSON object per line: a header `{"session": id}`, then one
`{"seq": n, "ops": [[sql, params], ...]}` per waiting change. A change is
appended *before* it joins the write queue (write-ahead), and the transaction
that finally writes it also records `{"session", "seq"}` under the settings key
`store.journal`. Replaying at the next start skips what that marker says was
written, so a process killed between a commit and deleting this file does not
write a change twice. The files are deleted whenever no change is waiting.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import uuid
from pathlib import Path

Op = tuple[str, tuple]

MARKER_KEY = "store.journal"
BLOB = "$blob"  # a bytes argument, in base64
MARKER_SQL = ("INSERT INTO settings (key, value) VALUES (?, ?) "
              "ON CONFLICT(key) DO UPDATE SET value = excluded.value")


def journal_path(db_path: str | Path) -> Path:
    return Path(f"{db_path}-pending.jsonl")


def cache_dir() -> Path:
    """The user's cache folder for Tandem (`TANDEM_CACHE_DIR` overrides it)."""
    override = os.environ.get("TANDEM_CACHE_DIR")
    if override:
        return Path(override)
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home())
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "Tandem"


def fallback_journal_path(db_path: str | Path) -> Path:
    """The second place for a database's waiting changes: the user's cache
    folder (often another filesystem), named after the database's full path."""
    resolved = str(Path(db_path).resolve())
    digest = hashlib.sha256(resolved.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return cache_dir() / "pending" / f"{Path(db_path).name}-{digest}-pending.jsonl"


class PendingJournal:
    """The journal's files: beside the database first, then the cache folder
    (an entry goes to the first that takes it; loading reads both)."""

    def __init__(self, db_path: str | Path, fallback: Path | None = None):
        self.path = journal_path(db_path)
        self.fallback = fallback if fallback is not None else fallback_journal_path(db_path)
        self.session: str | None = None
        self._seq = 0
        self._headed: set[Path] = set()  # files that carry this session's header
        self.unreadable: list[str] = []  # journal files that could not be read at load

    @property
    def paths(self) -> list[Path]:
        return [self.path, self.fallback]

    def existing(self) -> list[Path]:
        """The journal files there are (and that can be seen)."""
        found = []
        for path in self.paths:
            try:
                if path.is_file():
                    found.append(path)
            except OSError:
                pass
        return found

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def append(self, seq: int, ops: list[Op]) -> Path:
        """Add one waiting change to the first file that takes it (which one is
        returned); raises OSError if neither can be written."""
        if self.session is None:
            self.session = uuid.uuid4().hex
        line = json.dumps({"seq": seq, "ops": _encoded(ops)}) + "\n"
        error: OSError | None = None
        for path in self.paths:
            head = "" if path in self._headed else json.dumps({"session": self.session}) + "\n"
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "a", encoding="utf-8") as f:
                    f.write(head + line)
            except OSError as e:
                error = e
                continue
            self._headed.add(path)
            return path
        raise error

    def rewrite(self, entries: list[tuple[int, list[Op]]]) -> Path:
        """Replace the journal with exactly `entries` (at exit, if an append had
        failed), in the first place that takes it; raises OSError if none does."""
        self.session = self.session or uuid.uuid4().hex
        error: OSError | None = None
        for path in self.paths:
            tmp = path.with_name(path.name + ".tmp")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(tmp, "w", encoding="utf-8") as f:
                    f.write(json.dumps({"session": self.session}) + "\n")
                    for seq, ops in entries:
                        f.write(json.dumps({"seq": seq, "ops": _encoded(ops)}) + "\n")
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except OSError as e:
                error = e
                continue
            for other in self.paths:  # the rewritten file holds everything now
                if other != path:
                    _unlink(other)
            self._headed = {path}
            return path
        raise error

    def marker(self, seq: int) -> Op:
        """The statement that records, in the same transaction, that `seq` is written."""
        return MARKER_SQL, (MARKER_KEY, json.dumps({"session": self.session, "seq": seq}))

    def load(self, marker: dict | None) -> list[tuple[int, list[Op]]]:
        """The changes of a previous run not yet written (per `marker`, the
        database's settings value under MARKER_KEY), from both files, adopting
        that run's session so that new changes continue it. A torn line (a
        write cut by a crash or a full disk) is skipped: that change was
        appended elsewhere, or never reached the queue."""
        entries: dict[int, list[Op]] = {}
        session = None
        for path in self.paths:
            try:
                if not path.exists():
                    continue
                if not path.is_file():  # a folder or a device there: nothing of ours
                    raise IsADirectoryError("not a regular file")
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
            except OSError as e:  # unreadable (rights, a folder): said at open, kept
                self.unreadable.append(f"{path} ({e.strerror or e})")
                continue
            file_session = None
            for line in text.splitlines():
                try:
                    item = json.loads(line)
                except ValueError:
                    continue
                if "session" in item:
                    file_session = item["session"]
                    session = session or file_session
                elif file_session is not None and file_session == session:
                    entries[int(item["seq"])] = [(sql, tuple(_decoded(a) for a in args))
                                                 for sql, args in item["ops"]]
            if file_session is not None and file_session == session:
                self._headed.add(path)
        self.session = session
        self._seq = max(entries, default=0)
        written = 0
        if marker and marker.get("session") == session:
            written = int(marker.get("seq", 0))
        return [(seq, entries[seq]) for seq in sorted(entries) if seq > written]

    def forget(self) -> None:
        """Start a new session; the files (if any) are someone else's business now."""
        self.session, self._seq, self._headed = None, 0, set()

    def discard(self) -> None:
        """Every change is written: delete the files (a new one starts a new session)."""
        self.forget()
        for path in self.paths:
            _unlink(path)


def _encoded(ops: list[Op]) -> list:
    """Ops as JSON takes them: bytes (an image's, schema 5) as {"$blob": base64}."""
    return [[sql, [{BLOB: base64.b64encode(a).decode("ascii")}
                   if isinstance(a, (bytes, bytearray, memoryview)) else a for a in args]]
            for sql, args in ops]


def _decoded(arg):
    if isinstance(arg, dict) and isinstance(arg.get(BLOB), str):
        return base64.b64decode(arg[BLOB])
    return arg


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
