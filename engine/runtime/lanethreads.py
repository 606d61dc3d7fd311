"""Lane threads and their MLX streams, kept and reused by the next engine.

A lane runs on a thread of its own with an MLX stream of its own. Neither
may end: with MLX 0.32 on Linux a thread that used its own stream can abort
the process from its thread-exit destructors near interpreter shutdown, and
MLX never frees a stream. So a lane's thread, once its lane has closed,
parks holding nothing of it, and the next lane of the same device and
priority runs on it with the same stream: loading a model again (the app's
model switch) adds no thread and no stream. Before, each load left one of
each behind, about 45 MiB of resident memory per reload of the default model
(benchmarks/reload_memory.py). The disk tier's writer and the restorer run
their queues here too (CPU streams), so no thread that touched MLX ever ends.

Whoever ends a job waits for its thread to park (`Started.wait_parked`), not
only for the job's last line: Python 3.11 ends a daemon thread that runs
Python while the interpreter finalizes (pthread_exit, when it asks for the
GIL), and MLX's thread-local destructors then take the GIL again (its
compiled functions' cache, its random key): the process aborts, or
segfaults once the interpreter is gone. A parked thread is blocked, holding
no GIL, and is never woken again, so the process may end around it.
"""

from __future__ import annotations

import queue
import threading
import traceback
from dataclasses import dataclass
from typing import Callable

import mlx.core as mx

from ..core.priority import lower_thread

Job = Callable[[mx.Stream], None]

_lock = threading.Lock()
_parked_now = threading.Condition(_lock)  # notified when a thread parks
_parked: dict[tuple[str, int], list[LaneThread]] = {}
_made = 0


class LaneThread:
    """A thread that runs lane jobs one after another on its own stream."""

    def __init__(self, device: str, nice: int):
        self.device, self.nice = device, nice
        self._jobs: queue.SimpleQueue[tuple[Job, str]] = queue.SimpleQueue()
        self._given = self._ended = 0  # jobs given to it, and ended with it parked
        self._thread = threading.Thread(target=self._main, daemon=True, name="lane-parked")
        self._thread.start()

    @property
    def native_id(self) -> int | None:
        return self._thread.native_id

    def run(self, job: Job, name: str) -> int:
        """Queue `job`; its ticket (for `wait_parked`)."""
        with _lock:
            self._given += 1
            ticket = self._given
        self._jobs.put((job, name))
        return ticket

    def wait_parked(self, ticket: int, timeout: float | None) -> bool:
        """Wait until job `ticket` has ended and the thread parked after it."""
        with _parked_now:
            return _parked_now.wait_for(lambda: self._ended >= ticket, timeout)

    def _main(self) -> None:
        lower_thread(self.nice)  # before the stream exists: its thread inherits it
        stream = mx.new_stream(mx.Device(mx.gpu if self.device == "gpu" else mx.cpu))
        while True:
            job, name = self._jobs.get()
            self._thread.name = name
            try:
                job(stream)
            except BaseException:  # a lane reports its own failures; keep the thread
                traceback.print_exc()
            finally:
                del job  # holds nothing of the lane while parked
                self._thread.name = "lane-parked"
                with _parked_now:  # the last Python it runs before it blocks in get()
                    _parked.setdefault((self.device, self.nice), []).append(self)
                    self._ended += 1
                    _parked_now.notify_all()


@dataclass(frozen=True, slots=True)
class Started:
    """A job given to a lane thread: `wait_parked` once it has been told to end."""
    thread: LaneThread
    ticket: int

    @property
    def native_id(self) -> int | None:
        return self.thread.native_id

    def wait_parked(self, timeout: float | None) -> bool:
        """True once the job has ended and its thread parked (within `timeout`)."""
        return self.thread.wait_parked(self.ticket, timeout)


def start(job: Job, device: str, nice: int, name: str, after: LaneThread | None = None,
          wait_s: float = 10.0) -> Started:
    """Run `job(stream)` on a parked lane thread of this device and priority,
    or on a new one. `after`: a lane thread whose job is ending (a lane
    restarting, engine/runtime/lane_restart.py): wait up to `wait_s` for it to park
    and run on it, so a restart adds no thread and no stream."""
    with _parked_now:
        idle = _parked.setdefault((device, nice), [])
        if after is not None and (after.device, after.nice) == (device, nice):
            _parked_now.wait_for(lambda: after in idle, wait_s)
        thread = after if after is not None and after in idle else (
            idle[-1] if idle else None)
        if thread is not None:
            idle.remove(thread)
    if thread is None:
        global _made
        thread = LaneThread(device, nice)
        with _lock:
            _made += 1
    return Started(thread, thread.run(job, name))


def count() -> int:
    """Lane threads made so far (parked or running)."""
    return _made
