"""Embedding work on a lane's thread (issues 35, 47): the jobs queued on a
lane run between its steps, in its stream, one bounded slice at a time
(core/embed_place.py's `SlicePace`: about one step's time while the lane
has chat work, a quarter second while it has none), so a big request never
holds the lane for long. A slice is one padded encoder pass over a job's
next inputs, shortest first (a long text does not pad a hundred short
ones); the jobs take turns. A cancelled job runs none of its slices left:
it leaves at the next slice boundary, and only then says it is gone
(`EmbedJob.when_gone`: the server's slot is held until then)."""

from __future__ import annotations

import threading
import time
import traceback
from concurrent.futures import Future
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from ..core.embed_place import SlicePace, slice_rows
from ..core.errors import EngineError


@dataclass(eq=False)
class EmbedJob:
    request_id: str
    tab_id: str | None
    inputs: list[list[int]]  # token ids, one list per input
    model: object  # the EmbeddingModel it was submitted for
    future: Future = field(default_factory=Future)  # cancelled: its slices left never run
    lane: str = ""
    started: float = field(default_factory=time.monotonic)
    slices: int = 0  # run so far
    left: list[int] = field(init=False)  # inputs not embedded yet, shortest first
    out: np.ndarray | None = field(init=False, default=None)
    _gone: list = field(init=False, default_factory=list)  # callbacks; None once gone
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.left = sorted(range(len(self.inputs)), key=lambda i: len(self.inputs[i]))

    @property
    def tokens(self) -> int:
        return sum(len(ids) for ids in self.inputs)

    @property
    def tokens_left(self) -> int:
        return sum(len(self.inputs[i]) for i in list(self.left))

    def when_gone(self, fn) -> None:
        """`fn(job)` once no lane runs or will run this job (at once if so now)."""
        with self._lock:
            if self._gone is not None:
                self._gone.append(fn)
                return
        fn(self)

    def fail(self, error: Exception) -> None:
        if not self.future.done():
            self.future.set_exception(error)
        self.leave()

    def leave(self) -> None:
        """No lane runs it any more: its `when_gone` callbacks run (once)."""
        with self._lock:
            callbacks, self._gone = self._gone, None
        for fn in callbacks or ():
            try:
                fn(self)
            except Exception:  # one listener's fault is not the lane's
                traceback.print_exc()

    def run_slice(self, budget: int, pace: SlicePace) -> None:
        """Embed its next inputs (at most `budget` padded tokens, at least one)."""
        n = slice_rows([len(self.inputs[i]) for i in self.left[:budget]], budget)
        rows, self.left = self.left[:n], self.left[n:]
        batch = [self.inputs[i] for i in rows]
        started = time.perf_counter()
        vectors = self.model.embed(batch)
        mx.eval(vectors)
        values = np.array(vectors, dtype=np.float32)
        pace.learn(len(batch) * max(len(ids) for ids in batch), time.perf_counter() - started)
        if self.out is None:
            self.out = np.zeros((len(self.inputs), values.shape[1]), np.float32)
        self.out[rows] = values
        self.slices += 1
        if not self.left and not self.future.done():
            self.future.set_result(self.out)


class EmbedQueue:
    """A lane's embedding jobs, guarded by the lane's wake-up condition
    (adding one wakes the lane; the lane runs one slice between two steps)."""

    def __init__(self, wakeup):
        self._wakeup = wakeup
        self._jobs: list[EmbedJob] = []  # in turn: the first runs the next slice
        self._running: EmbedJob | None = None  # off the line while its slice runs
        self.closed: str | None = None  # why it takes no more
        self.pace = SlicePace()
        self.slices = 0  # run on this lane

    def __bool__(self) -> bool:
        return bool(self._jobs)

    @property
    def tokens(self) -> int:
        """Embedding tokens queued here, not embedded yet."""
        running = self._running
        return (sum(job.tokens_left for job in list(self._jobs))
                + (running.tokens_left if running is not None else 0))

    def add(self, job: EmbedJob) -> bool:
        with self._wakeup:
            if self.closed is not None:
                return False
            cancelled = job.future.done()
            if not cancelled:
                self._jobs.append(job)
                self._wakeup.notify()
        if cancelled:  # before it came
            job.leave()
        return True

    def run_slice(self, busy: bool, step_s: float | None) -> None:
        """On the lane's thread: drop the jobs cancelled, then one slice of
        the next job's inputs (`busy`: the lane has chat work, whose last
        step took `step_s`); that job goes to the back of the line."""
        with self._wakeup:
            dropped = [job for job in self._jobs if job.future.done()]
            self._jobs = [job for job in self._jobs if not job.future.done()]
            job = self._running = self._jobs.pop(0) if self._jobs else None
        for gone in dropped:
            gone.leave()
        if job is None:
            return
        try:
            job.run_slice(self.pace.budget(busy, step_s), self.pace)
        except Exception as e:  # the model failed on these inputs: the job says so
            job.fail(e)
            return
        finally:
            self.slices += 1
            self._running = None
        with self._wakeup:
            again = not job.future.done() and self.closed is None
            if again:
                self._jobs.append(job)
        if again:
            return
        if not job.future.done():  # the lane closed meanwhile
            job.fail(EngineError(self.closed or "The lane closed.", "closed"))
        job.leave()  # finished, or cancelled: its slices left never run

    def close(self, why: str) -> None:
        """No more jobs; those queued fail with `why`."""
        with self._wakeup:
            self.closed = why
            jobs, self._jobs = self._jobs, []
        for job in jobs:
            job.fail(EngineError(why, "closed"))
