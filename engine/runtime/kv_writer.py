"""The disk tier's writer (disk_tier.py): one job on a parked CPU lane
thread (lanethreads.py: a thread that used MLX never ends), started at the
first save, that runs the tier's writes and forgets in the order they were
queued. `save` never blocks a lane: when `QUEUE` saves wait already, it is
dropped and counted. It runs at a lower priority than the lanes
(`WRITER_NICE`) and its MLX work on that thread's CPU stream; `close`
drains the queue within a time limit, then `hurry` stops the writes after
the file being written, so no thread is left saving as the process ends."""

from __future__ import annotations

import queue
import threading
from typing import Callable

QUEUE = 8  # saves waiting for the writer; more are dropped (and counted)
WRITER_NICE = 15  # the writer thread's niceness: it yields the cores to the lanes


class DiskWriter:
    def __init__(self, write: Callable[[list[int], object, str], None],
                 release: Callable[[str], None], stopped: Callable[[Exception], None]):
        """`write(tokens, layers, owner)` and `release(owner)` run on the
        writer's thread; `stopped(error)`: one of them raised (the tier
        saves nothing more)."""
        self._write, self._release, self._stopped = write, release, stopped
        self.dropped = 0  # saves dropped because the writer was behind
        self._lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._waiting = 0  # saves in the queue (at most QUEUE)
        self._started = None  # lanethreads.Started: the writer's job on a parked thread
        self.hurry = False  # close() ran out of time: stop after the file being written

    def save(self, tokens: list[int], layers, owner: str) -> bool:
        """Queue a save; False when `QUEUE` wait already (dropped, counted)."""
        with self._lock:
            if self._waiting >= QUEUE:
                self.dropped += 1
                return False
            self._waiting += 1
        self._post(("save", tokens, layers, owner))
        return True

    def forget(self, owner: str) -> None:
        """Queue `release(owner)`, behind the saves queued before it."""
        self._post(("forget", owner))

    def _post(self, item) -> None:
        if self._started is None:
            # A parked CPU thread at a lower priority than the lanes (the lanes
            # get the cores first; Linux): it never ends (lanethreads.py).
            from . import lanethreads

            self._started = lanethreads.start(self._write_loop, "cpu", WRITER_NICE,
                                              "kv-disk-writer")
        self._queue.put(item)

    def _write_loop(self, stream) -> None:
        import mlx.core as mx

        # MLX work off the lane threads stays on a CPU stream: MLX does not
        # promise that two threads may encode GPU (Metal) work at once
        # (engine/README.md, "Threads"); the KV it reads is already evaluated.
        with mx.stream(stream):
            self._serve_queue()

    def _serve_queue(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if item[0] == "forget":
                    self._release(item[1])
                    continue
                with self._lock:
                    self._waiting -= 1
                if not self.hurry:
                    self._write(*item[1:])
            except Exception as e:  # a writer that dies saves nothing more: say so once
                self._stopped(e)
            finally:
                self._queue.task_done()

    def close(self, timeout: float = 10.0) -> bool:
        """Finish the queued saves within `timeout` seconds; True if all were.
        Past it, the writes stop after the file being written (`hurry`),
        waited for as long again."""
        if self._started is None:
            return True
        self._queue.put(None)
        done = self._started.wait_parked(timeout)
        self.hurry = not done
        if done or self._started.wait_parked(timeout):
            self._started, self.hurry = None, False
        return done
