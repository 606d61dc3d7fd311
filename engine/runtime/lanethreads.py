"""Lane threads and their MLX streams, kept and reused by the next engine.

A lane runs on a thread of its own with an MLX stream of its own. Neither
may end: with MLX 0.32 on Linux a thread that used its own stream can abort
the process from its thread-exit destructors near interpreter shutdown, and
MLX never frees a stream. So a lane's thread, once its lane has closed,
parks holding nothing of it, and the next lane of the same device and
priority runs on it with the same stream: loading a model again (the app's
model switch) adds no thread and no stream. Before, each load left one of
each behind, about 45 MiB of resident memory per reload of the default model
(benchmarks/reload_memory.py).
"""

from __future__ import annotations

import queue
import threading
import traceback
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
        self._thread = threading.Thread(target=self._main, daemon=True, name="lane-parked")
        self._thread.start()

    @property
    def native_id(self) -> int | None:
        return self._thread.native_id

    def run(self, job: Job, name: str) -> None:
        self._jobs.put((job, name))

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
                with _parked_now:
                    _parked.setdefault((self.device, self.nice), []).append(self)
                    _parked_now.notify_all()


def start(job: Job, device: str, nice: int, name: str, after: LaneThread | None = None,
          wait_s: float = 10.0) -> LaneThread:
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
    thread.run(job, name)
    return thread


def count() -> int:
    """Lane threads made so far (parked or running)."""
    return _made
