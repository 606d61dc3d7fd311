"""Changes the database could not take yet, kept on disk beside it
(`tandem.db-pending.jsonl`) so that quitting or a crash does not lose them.

Qt-free. One JSON object per line: a header `{"session": id}`, then one
`{"seq": n, "ops": [[sql, params], ...]}` per waiting change. A change is
appended *before* it joins the write queue (write-ahead), and the transaction
that finally writes it also records `{"session", "seq"}` under the settings key
`store.journal`. Replaying at the next start skips what that marker says was
written, so a process killed between a commit and deleting this file does not
write a change twice. The file is deleted whenever no change is waiting.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

Op = tuple[str, tuple]

MARKER_KEY = "store.journal"
MARKER_SQL = ("INSERT INTO settings (key, value) VALUES (?, ?) "
              "ON CONFLICT(key) DO UPDATE SET value = excluded.value")


def journal_path(db_path: str | Path) -> Path:
    return Path(f"{db_path}-pending.jsonl")


class PendingJournal:
    def __init__(self, db_path: str | Path):
        self.path = journal_path(db_path)
        self.session: str | None = None
        self._seq = 0

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def append(self, seq: int, ops: list[Op]) -> None:
        """Add one waiting change; raises OSError if the file cannot be written."""
        lines = []
        if self.session is None:
            self.session = uuid.uuid4().hex
            lines.append(json.dumps({"session": self.session}))
        lines.append(json.dumps({"seq": seq, "ops": [[sql, list(args)] for sql, args in ops]}))
        with open(self.path, "a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))

    def rewrite(self, entries: list[tuple[int, list[Op]]]) -> None:
        """Replace the file with exactly `entries` (at exit, if an append had failed)."""
        self.session = self.session or uuid.uuid4().hex
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps({"session": self.session}) + "\n")
            for seq, ops in entries:
                f.write(json.dumps({"seq": seq, "ops": [[s, list(a)] for s, a in ops]}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def marker(self, seq: int) -> Op:
        """The statement that records, in the same transaction, that `seq` is written."""
        return MARKER_SQL, (MARKER_KEY, json.dumps({"session": self.session, "seq": seq}))

    def load(self, marker: dict | None) -> list[tuple[int, list[Op]]]:
        """The changes of a previous run not yet written (per `marker`, the
        database's settings value under MARKER_KEY), adopting that run's session
        so that new changes continue it. A torn last line (killed mid-append) is
        ignored: that change never reached the queue either."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        entries, session = [], None
        for line in text.splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                break
            if session is None:
                session = item.get("session")
                continue
            entries.append((int(item["seq"]), [(sql, tuple(args)) for sql, args in item["ops"]]))
        self.session = session
        self._seq = max((seq for seq, _ in entries), default=0)
        written = 0
        if marker and marker.get("session") == session:
            written = int(marker.get("seq", 0))
        return [(seq, ops) for seq, ops in entries if seq > written]

    def forget(self) -> None:
        """Start a new session; the file (if any) is someone else's business now."""
        self.session, self._seq = None, 0

    def discard(self) -> None:
        """Every change is written: delete the file (a new one starts a new session)."""
        self.forget()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
