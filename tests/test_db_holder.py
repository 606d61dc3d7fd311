"""A second process that holds the chat database's lock, for the database tests
(tests/test_db_*.py), and a check that it really blocks writers."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

HOLDER = textwrap.dedent("""
    import select, sqlite3, sys
    path, mode, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    db = sqlite3.connect(path, isolation_level=None, timeout=10)
    db.execute(f"BEGIN {mode}")
    db.execute("INSERT INTO settings (key, value) VALUES ('held-by', '\\"holder\\"')")
    print("LOCKED", flush=True)
    select.select([sys.stdin], [], [], seconds)  # a line on stdin, or the time runs out
    db.execute("ROLLBACK")  # leaves the database as it was
    print("RELEASED", flush=True)
""")


class LockHolder:
    """`python -c HOLDER`: BEGIN IMMEDIATE (or EXCLUSIVE) and an insert on `path`,
    held until `release()` (a line on its stdin) or for `seconds`."""

    def __init__(self, path: str | Path, mode: str = "IMMEDIATE", seconds: float = 60.0):
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), mode,
                                      str(seconds)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line == "LOCKED\n", f"the holder did not take the lock: {line!r}"

    def release(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            assert self.proc.stdout.readline() == "RELEASED\n"
        self.proc.wait(10)
        self.proc.stdin.close()
        self.proc.stdout.close()

    def __enter__(self) -> LockHolder:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def test_the_holder_blocks_writers_until_released(tmp_path):
    from app.store import ChatStore

    db = tmp_path / "held.db"
    ChatStore(db).close()
    writer = sqlite3.connect(db, isolation_level=None, timeout=0)
    with LockHolder(db):
        try:
            writer.execute("BEGIN IMMEDIATE")
            raise AssertionError("the holder did not block a writer")
        except sqlite3.OperationalError as e:
            assert "locked" in str(e)
        assert writer.execute("SELECT count(*) FROM settings").fetchone() == (0,)  # WAL reads
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("ROLLBACK")
    writer.close()
