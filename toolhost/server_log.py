"""A stdio server's stderr, kept in a log file of bounded size.

The server writes into a pipe (never into the file itself: a server could
write without end); a thread copies what arrives into `<server>.log`, and
when the file would pass `cap` bytes it becomes `<server>.log.1` (the one
before is dropped) and a new file starts. So a server's logs take at most
twice `cap` on disk, across any number of starts, and a server never waits
on a full pipe: the copy reads on until every holder of the pipe closes it."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

CAP = 4 << 20  # bytes of one log file; one older copy is kept beside it
_writing = threading.Lock()  # one copy at a time writes (a restart's old child may still)


class ServerLog:
    def __init__(self, path: Path, cap: int = CAP):
        """OSError when the log cannot be opened (the server is not started)."""
        self.path, self.cap = Path(path), cap
        self._out = open(self.path, "ab")
        read, write = os.pipe()
        self.stderr = os.fdopen(write, "wb", buffering=0)  # the server's stderr
        self._thread = threading.Thread(target=self._copy, args=(read,),
                                        name=f"mcp-log {self.path.name}", daemon=True)
        self._thread.start()

    def spawned(self) -> None:
        """The server has its copy of the pipe: this one closes, so the copy
        ends once the server (and any child holding it) has gone."""
        with contextlib.suppress(OSError):
            self.stderr.close()

    def wait(self, timeout: float) -> bool:
        """Wait until everything the server wrote is in the file."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _copy(self, read: int) -> None:
        try:
            while chunk := os.read(read, 1 << 16):
                if self._out is None:
                    continue  # the log failed: read on (a server never blocks), unkept
                with _writing:
                    try:
                        self._write(chunk)
                    except OSError:  # a full disk, the folder removed: no more logging
                        self._out.close()
                        self._out = None
        finally:
            os.close(read)
            if self._out is not None:
                self._out.close()

    def _write(self, chunk: bytes) -> None:
        out = self._out
        if out.tell() + len(chunk) > self.cap and out.tell() > 0:
            out.close()
            self._out = None
            os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            out = self._out = open(self.path, "ab")
        out.write(chunk[:self.cap])  # (a chunk is 64 KiB at most: cut only by a tiny cap)
        out.flush()
