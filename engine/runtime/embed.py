"""Embedding work on a lane's thread (issue 35): the jobs queued on a lane
run between its steps, in its stream, as few padded batches as their
lengths allow (sorted by length, at most `BATCH_TOKENS` padded tokens a
batch), so a long text does not pad a hundred short ones."""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

BATCH_TOKENS = 8192  # padded tokens per encoder pass


@dataclass(eq=False)
class EmbedJob:
    request_id: str
    tab_id: str | None
    inputs: list[list[int]]  # token ids, one list per input
    model: object  # the EmbeddingModel it was submitted for
    future: Future = field(default_factory=Future)
    lane: str = ""
    started: float = field(default_factory=time.monotonic)

    @property
    def tokens(self) -> int:
        return sum(len(ids) for ids in self.inputs)


def run_jobs(jobs: list[EmbedJob]) -> None:
    """Embed every job's inputs (each job's future gets its (n, dims)
    float32 array, or the exception)."""
    by_model: dict[int, list[EmbedJob]] = {}
    for job in jobs:
        by_model.setdefault(id(job.model), []).append(job)
    for group in by_model.values():
        model = group[0].model
        rows = [(len(ids), j, i) for j, job in enumerate(group) for i, ids in enumerate(job.inputs)]
        rows.sort()
        out = [np.zeros((len(job.inputs), model.dims), np.float32) for job in group]
        try:
            for batch in _batches(rows):
                vectors = model.embed([group[j].inputs[i] for _, j, i in batch])
                mx.eval(vectors)
                values = np.array(vectors, dtype=np.float32)
                for row, (_, j, i) in zip(values, batch):
                    out[j][i] = row
        except Exception as e:  # the model failed on these inputs: they say so
            for job in group:
                if not job.future.done():
                    job.future.set_exception(e)
            continue
        for job, vectors in zip(group, out):
            if not job.future.done():
                job.future.set_result(vectors)


def _batches(rows):
    batch = []
    for row in rows:
        longest = max(row[0], batch[-1][0] if batch else 0)
        if batch and longest * (len(batch) + 1) > BATCH_TOKENS:
            yield batch
            batch = []
        batch.append(row)
    if batch:
        yield batch


class EmbedQueue:
    """A lane's embedding jobs, guarded by the lane's wake-up condition
    (adding one wakes the lane; the lane takes them all between steps)."""

    def __init__(self, wakeup):
        self._wakeup = wakeup
        self._jobs: list[EmbedJob] = []
        self.closed: str | None = None  # why it takes no more

    def __bool__(self) -> bool:
        return bool(self._jobs)

    @property
    def tokens(self) -> int:
        return sum(job.tokens for job in list(self._jobs))

    def add(self, job: EmbedJob) -> bool:
        with self._wakeup:
            if self.closed is not None:
                return False
            self._jobs.append(job)
            self._wakeup.notify()
        return True

    def take(self) -> list[EmbedJob]:
        with self._wakeup:
            jobs, self._jobs = self._jobs, []
        return jobs

    def close(self, why: str) -> None:
        """No more jobs; those queued fail with `why`."""
        from ..core.errors import EngineError

        with self._wakeup:
            self.closed = why
            jobs, self._jobs = self._jobs, []
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(EngineError(why, "closed"))
