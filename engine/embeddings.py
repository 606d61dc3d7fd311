"""Embeddings on the engine (issue 35): an embedding model loaded beside the
chat model (`Engine(embedding_model=...)`, `Engine.set_embedding_model`),
counted in the memory plan as an auxiliary model; `Engine.embed(inputs)`
places the request on a lane (core/embed_place.py: where no decode runs),
which runs it between its steps in bounded slices (runtime/embed.py), so a
chat on that lane keeps streaming; `EmbedHandle.cancel()` drops the slices
not run yet. The Decisions tab and the timeline see it as a request with one
"embed" phase, finished once no lane runs it any more."""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from concurrent.futures import CancelledError
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

import numpy as np

from .core.embed_place import EmbedLaneView, place_embedding
from .core.errors import EngineError
from .core.events import Finished, MemoryPlanned, Routed
from .core.memory import AuxModel
from .runtime.embed import EmbedJob

MAX_INPUTS = 2048  # per request (OpenAI's limit)
MAX_TOKENS = 300_000  # per request, all inputs together (OpenAI's)
START_WAIT_S = 300.0  # a request sent while the lanes start waits this long for one
_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Embedded:
    vectors: np.ndarray  # (inputs, dims) float32
    tokens: int
    lane: str


class EmbedHandle:
    def __init__(self, job: EmbedJob, on_gone):
        self.job = job
        job.when_gone(on_gone)

    def result(self, timeout: float | None = None) -> Embedded:
        try:
            vectors = self.job.future.result(timeout)
        except FutureTimeout:
            raise EngineError("The embedding did not finish in time.", "timeout") from None
        except CancelledError:
            raise EngineError("The embedding was cancelled.", "cancelled") from None
        return Embedded(vectors, self.job.tokens, self.job.lane)

    def cancel(self) -> None:
        """Stop it: the lane runs none of its slices not started (no-op once done)."""
        self.job.future.cancel()

    def when_gone(self, fn) -> None:
        """`fn(job)` once no lane runs it any more: finished, failed, or
        cancelled and its running slice ended (the server's slot is held till then)."""
        self.job.when_gone(fn)


def embedding_aux(model) -> tuple[AuxModel, ...]:
    return (AuxModel("embedding", model.name, model.weight_bytes),) if model is not None else ()


class Embedder:
    def __init__(self, engine, model=None):
        self.engine, self.model = engine, model

    def set_model(self, model) -> None:
        """Embed with `model` from now on (None: none); the memory plan shows it."""
        engine = self.engine
        self.model = model
        aux = tuple(a for a in engine.memory_plan.aux if a.role != "embedding")
        engine.memory_plan = dataclasses.replace(engine.memory_plan,
                                                 aux=aux + embedding_aux(model))
        engine._emit(MemoryPlanned("", None, plan=engine.memory_plan))

    def submit(self, inputs: list, tab_id: str | None = None) -> EmbedHandle:
        """`inputs`: texts, or lists of token ids (the model's vocabulary)."""
        model = self.model
        if model is None:
            raise EngineError("No embedding model is loaded (tandem serve --embedding-model M; "
                              "in the app: Engine > Local server settings).", "no-embedding-model")
        if not inputs or len(inputs) > MAX_INPUTS:
            raise EngineError(f"Give 1 to {MAX_INPUTS} inputs to embed.", "bad-argument")
        given = sum(min(len(x), model.max_tokens) for x in inputs if isinstance(x, list))
        if given > MAX_TOKENS:  # token ids counted before any is checked or copied
            raise EngineError(f"{given:,} tokens to embed in one request; at most "
                              f"{MAX_TOKENS:,}.", "bad-argument")
        ids = [model.check_ids(list(x)) if isinstance(x, list) else model.encode(x)
               for x in inputs]
        if any(not row for row in ids):
            raise EngineError("An input to embed is empty.", "bad-argument")
        job = EmbedJob(f"embed-{next(_ids)}", tab_id, ids, model)
        if job.tokens > MAX_TOKENS:
            raise EngineError(f"{job.tokens:,} tokens to embed in one request; at most "
                              f"{MAX_TOKENS:,}.", "bad-argument")
        self._place(job)
        return EmbedHandle(job, self._finished)

    def _place(self, job: EmbedJob, wait: bool = True) -> None:
        """Onto a serving lane; while the lanes are still starting (warming
        up, calibrating), once one serves, on a thread of its own (`wait`):
        a request sent as the engine starts waits, as a chat request does."""
        engine = self.engine
        with engine.director.lock:
            lanes = [lane for lane in engine.lanes.values()
                     if lane.failed is None and lane.phase == "serving"]
            starting = any(lane.failed is None and not lane.ready.is_set()
                           for lane in engine.lanes.values())
            if not lanes and wait and starting:
                threading.Thread(target=self._place_when_serving, args=(job,),
                                 name="embed-waits-for-a-lane", daemon=True).start()
                return
            if not lanes:
                raise EngineError("No lane is serving yet.", "closed")
            views = [EmbedLaneView(lane.name, lane.kind, len(lane.scheduler.running),
                                   lane.scheduler.queue_depth
                                   + len(lane.scheduler.active()) - len(lane.scheduler.running),
                                   lane.embeds.tokens) for lane in lanes]
            name, why = place_embedding(views, job.tokens)
        job.lane, job.started = name, time.monotonic()
        engine._emit(Routed(job.request_id, job.tab_id, phase="embed", lane=name, reason=why))
        if not engine.lanes[name].embeds.add(job):
            job.fail(EngineError("The lane closed.", "closed"))

    def _place_when_serving(self, job: EmbedJob) -> None:
        try:
            if not self.engine.wait_ready(START_WAIT_S):
                raise EngineError("No lane is serving yet.", "closed")
            self._place(job, wait=False)
        except EngineError as e:
            job.fail(e)

    def _finished(self, job: EmbedJob) -> None:
        future = job.future
        failed = None if future.cancelled() else future.exception()
        reason = "cancelled" if future.cancelled() else "error" if failed else "stop"
        self.engine._emit(Finished(
            job.request_id, job.tab_id, reason=reason, text="",
            prompt_tokens=job.tokens, cached_tokens=0, output_tokens=0,
            ttft_s=None, time_per_output_token_s=None,
            e2e_s=time.monotonic() - job.started, lanes=(("embed", job.lane),),
            error=str(failed) if failed else None))
