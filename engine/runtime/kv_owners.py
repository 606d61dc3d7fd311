"""Who uses each saved KV segment (issue 33): deleting a chat removes the
segments no other chat (or API client) uses.

One SQLite table beside the disk tier's folders (`<root>/owners.sqlite3`),
shared by every model's folder and every process using the root: a row per
(segment, owner), the segment named by its path under the root
("<model folder>/<file>.kv"). A save records its owner on every segment of
its prefix (the ones it reused as well as the ones it wrote), so a segment's
owners include those of every segment chained after it. The owner is the
request's `tab_id`: the app's chat id, "api:<client>" for the server, ""
for none.

It is bookkeeping for a cache: a locked database skips the update (the
segment stays until the byte budget evicts it), a damaged one is replaced
by an empty one. Never an error for the caller."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

FILE = "owners.sqlite3"
KEY = re.compile(r"[0-9a-f]{24}/[0-9a-f]{40}_\d+_\d+\.kv")  # what a segment's key looks like
TIMEOUT_S = 2.0


class Owners:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.path = self.root / FILE
        self.notes: list[str] = []

    def _connect(self) -> sqlite3.Connection:
        fresh = not self.path.exists()
        con = sqlite3.connect(self.path, timeout=TIMEOUT_S, isolation_level=None)
        if fresh:
            self.path.chmod(0o600)
        con.execute("CREATE TABLE IF NOT EXISTS owners (segment TEXT NOT NULL, "
                    "owner TEXT NOT NULL, PRIMARY KEY (segment, owner)) WITHOUT ROWID")
        con.execute("CREATE INDEX IF NOT EXISTS by_owner ON owners (owner)")
        return con

    def _run(self, work, default):
        """`work(connection)` in one transaction; `default` when the database
        is locked (skipped) or damaged (replaced by an empty one)."""
        for attempt in (0, 1):
            try:
                con = self._connect()
                try:
                    con.execute("BEGIN IMMEDIATE")
                    out = work(con)
                    con.execute("COMMIT")
                    return out
                finally:
                    con.close()
            except sqlite3.OperationalError as e:
                if "locked" in str(e) or "busy" in str(e):
                    return default
                if attempt:
                    return default
                self._replace(e)
            except sqlite3.DatabaseError as e:  # not a database, malformed: start again
                if attempt:
                    return default
                self._replace(e)
        return default

    def _replace(self, error: Exception) -> None:
        self.notes.append(f"Replaced the saved KV owners list, which could not be read ({error}).")
        for suffix in ("", "-journal", "-wal", "-shm"):
            Path(str(self.path) + suffix).unlink(missing_ok=True)

    def key(self, path: Path) -> str:
        return f"{path.parent.name}/{path.name}"

    def add(self, paths: list[Path], owner: str) -> None:
        rows = [(self.key(p), owner) for p in paths]
        self._run(lambda con: con.executemany(
            "INSERT OR IGNORE INTO owners VALUES (?, ?)", rows), None)

    def drop(self, paths: list[Path]) -> None:
        """Segments that left the disk."""
        rows = [(self.key(p),) for p in paths]
        self._run(lambda con: con.executemany("DELETE FROM owners WHERE segment = ?", rows),
                  None)

    def release(self, owner: str) -> list[Path]:
        """`owner` uses nothing any more: the segments it used that no one
        else does (to be removed), as paths under the root."""
        def work(con):
            mine = [s for (s,) in con.execute("SELECT segment FROM owners WHERE owner = ?",
                                              (owner,))]
            con.execute("DELETE FROM owners WHERE owner = ?", (owner,))
            return [s for s in mine if con.execute(
                "SELECT 1 FROM owners WHERE segment = ? LIMIT 1", (s,)).fetchone() is None]
        # A key is only ever a file in one of the root's model folders.
        return [self.root / s for s in self._run(work, []) if KEY.fullmatch(s)]


def release_saved_kv(root: str | Path, owner: str) -> int:
    """Remove the segments only `owner` used, in every model's folder under
    `root` (no engine needed: the app with no model loaded); bytes freed."""
    if not (Path(root) / FILE).exists():
        return 0
    freed = 0
    for path in Owners(root).release(owner):
        try:
            freed += path.stat().st_size
            path.unlink()
        except OSError:
            pass
    return freed
