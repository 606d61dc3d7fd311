"""A lane's model runner: all of a lane's MLX work, one `StepPlan` at a time.

It holds each request's device state (prefill caches, the decode batch over
mlx-lm's BatchKVCache, samplers) by request id and applies a plan in order:
requests leave (cancelled: KV to the prefix cache; moved: KV extracted and
evaluated for the other lane), admitted ones get caches from their prefix
match, prefilled and arriving ones join the batch, the batch decodes one token
each (step n+1 is started with `mx.async_eval` before step n's tokens are
read, as in mlx-lm), and prefill chunks run within the planned budget.
"""

from __future__ import annotations

import time

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import make_prompt_cache

from ..core.request import Request
from ..core.step import StepPlan, StepResult
from .batch import DecodeBatch
from .cachekinds import arrays_of, cast
from .constrain import row_masks
from .calibration import kv_dtype
from . import pauses
from .handoff import Handoff
from .prefill import Prefill, batch_groups, run_chunk, run_together, whole_cold
from .prefix import PrefixCache
from .sampling import TokenSampler, pending_arrays, sample_rows


class ModelRunner:
    """Runs plans on one lane's thread and stream. `accept` is thread-safe."""

    def __init__(self, model: nn.Module, prefix_cache: PrefixCache, clear_cache_every: int = 256,
                 solo_decode: bool = True, batch_prefill: bool = True):
        self.model = model
        self.prefix_cache = prefix_cache
        self.clear_cache_every = clear_cache_every
        self.solo_decode = solo_decode
        self.batch_prefill = batch_prefill
        self.kv_dtype = mx.float32
        self.prefills: dict[str, Prefill] = {}
        self.arrivals: dict[str, Handoff] = {}  # handed over by other lanes
        self.batch = DecodeBatch(model, solo_decode)
        self.steps = 0
        self.failed: list[Request] = []  # this step's requests whose cached KV failed

    def start(self) -> None:
        """On the lane thread, inside its stream: build the lane's own copy of
        the weights if it has one (engine/runtime/placement.py), then find
        the dtype KV is written in."""
        if callable(self.model) and not isinstance(self.model, nn.Module):
            self.model = self.model()
            self.batch.model = self.model
        self.kv_dtype = kv_dtype(self.model)

    def accept(self, request_id: str, handoff: Handoff) -> None:
        self.arrivals[request_id] = handoff

    def refuse(self, request_id: str) -> None:
        self.arrivals.pop(request_id, None)

    @property
    def kv_bytes(self) -> int:
        prefilling = sum(c.nbytes for p in list(self.prefills.values()) for c in p.caches)
        arriving = sum(c.nbytes for h in list(self.arrivals.values()) for c in h.caches)
        return self.batch.kv_bytes + prefilling + arriving

    # ---- one step ---------------------------------------------------------------
    def run(self, plan: StepPlan) -> StepResult:
        started = time.perf_counter()
        self.failed = []
        handoffs = self._leave(plan)
        for admission in plan.admitted:
            request = admission.request
            try:
                caches = (PrefixCache.materialize(admission.prefix, self.kv_dtype)
                          or make_prompt_cache(self.model))
            except Exception as exc:  # blocks that do not fit together: its KV, not the lane
                if not request.cached_tokens:
                    raise
                self._kv_failed(request, exc)
                continue
            matcher = (request.grammar_matcher.deep_copy()  # built at submit, never here
                       if request.grammar_matcher is not None else None)
            if matcher is None and request.params.grammar is not None:
                # Never unconstrained text for a request that asked for a grammar.
                request.failure = "Its grammar was not built before it reached the lane."
            self.prefills[request.request_id] = Prefill(
                request, TokenSampler(request.params, matcher), caches)
        joins = []
        for request in plan.joins:
            state = self._take_waiting(request)
            self._cast(state)
            joins.append((request, state.sampler, state.caches, state.next_token))
        self.batch.add_many(joins)
        if [r.request_id for r in self.batch.requests] != [r.request_id for r in plan.decode]:
            raise RuntimeError("the runner's decode batch differs from the plan")
        fed = self.batch.step() if plan.decode else None
        pending = self._prefill(plan)
        if plan.prefill and self.batch.drafts is not None:
            self.batch.drafts.disturbed()  # this step's time is not a decode step's
        if pending:
            mx.async_eval(pending)
        waited = time.perf_counter()
        tokens = fed.tolist() if fed is not None else []
        logprobs = self.batch.fed_logprobs() if fed is not None else []
        done = time.perf_counter()
        self.steps += 1
        if self.steps % self.clear_cache_every == 0:
            mx.clear_cache()
        return StepResult(tokens, done - started, handoffs, wait_s=done - waited,
                          logprobs=logprobs, extra=self.batch.extra,
                          extra_logprobs=self.batch.extra_logprobs,
                          verified=self.batch.verified, failed=self.failed)

    def _kv_failed(self, request: Request, exc: Exception) -> None:
        """The KV `request` started from (the prefix cache's, perhaps read
        back from disk) failed in the model: that request fails, its state
        goes, the prefix it used is dropped (RAM and disk) so no later
        request meets it, and the lane serves on: only this request's own
        caches saw the failed work."""
        import traceback

        traceback.print_exc()
        self.prefills.pop(request.request_id, None)
        request.failure = ("Its cached KV could not be used by the model "
                           f"({type(exc).__name__}: {exc}); that KV was dropped.")
        self.failed.append(request)
        self.prefix_cache.drop(request.prompt_ids[:request.cached_tokens])

    def _prefill(self, plan: StepPlan) -> list[mx.array]:
        """Run the plan's prefill chunks; whole cold prompts of similar length
        run as one batch (prefill.py), the others one by one. Returns the
        arrays to evaluate."""
        if plan.prefill:
            pauses.at("prefilling")
        pending, together = [], []
        for chunk in plan.prefill:
            if chunk.request in self.failed:
                continue
            prefill = self.prefills[chunk.request.request_id]
            if self.batch_prefill and whole_cold(prefill, chunk.start, chunk.size):
                together.append(prefill)
                continue
            try:
                logits = run_chunk(self.model, prefill, chunk.start, chunk.size)
                first = self._first(prefill, logits) if chunk.is_last else None
            except Exception as exc:  # on cached KV: that request's failure (_kv_failed)
                if not chunk.request.cached_tokens:
                    raise
                self._kv_failed(chunk.request, exc)
                continue
            pending.extend(arrays_of(prefill.caches))
            if first is not None:
                pending.append(first)
        for group in batch_groups(together):
            if len(group) == 1:
                prefill = group[0]
                logits = run_chunk(self.model, prefill, 0, prefill.request.num_prompt)
            else:
                logits = run_together(self.model, group)
            for i, prefill in enumerate(group):
                pending.extend(arrays_of(prefill.caches))
                pending.append(self._first(prefill, logits[i : i + 1]))
        return pending

    @staticmethod
    def _first(prefill: Prefill, logits: mx.array) -> mx.array:
        """Sample the request's first output token from its last prompt logits."""
        matcher = prefill.sampler.matcher
        request = prefill.request
        if request.vision is not None:  # prefilled: its merged embeddings are not needed again
            request.vision.embeddings = request.vision.positions = None
        masks = (row_masks([matcher], logits.shape[-1],
                           lambda _, why: setattr(request, "failure", why))
                 if matcher is not None else None)
        prefill.first = sample_rows(logits, [prefill.sampler], lambda _, n: request.model_ids[-n:],
                                    masks=masks)
        if prefill.sampler.wants_logprobs:  # evaluated with it (runner.run)
            mx.async_eval(pending_arrays([prefill.sampler]))
        return prefill.first

    def _leave(self, plan: StepPlan) -> dict[str, Handoff]:
        """Cancelled and moved requests leave; returns the moved ones' state."""
        rows = {r.request_id: i for i, r in enumerate(self.batch.requests)}
        gone: set[int] = set()
        for request in plan.cancelled:
            state = self._take(request, rows, gone)
            if state is not None and request.num_computed:
                self._cache(request, state)
        handoffs = {}
        for request, _ in plan.moves:
            state = self._take(request, rows, gone)
            # All of it computed before another lane's thread reads it.
            mx.eval(arrays_of(state.caches), state.next_token, state.sampler.arrays)
            handoffs[request.request_id] = state
        if gone:
            self.batch.keep([i for i in range(len(self.batch)) if i not in gone])
        return handoffs

    def _take(self, request: Request, rows: dict[str, int], gone: set[int]) -> Handoff | None:
        rid = request.request_id
        if rid in rows:
            i = rows[rid]
            gone.add(i)
            return Handoff(self.batch.samplers[i], self.batch.extract(i),
                           self.batch.pending_token(i))
        return self._take_waiting(request, required=False)

    def _take_waiting(self, request: Request, required: bool = True) -> Handoff | None:
        rid = request.request_id
        prefill = self.prefills.pop(rid, None)
        if prefill is not None:
            return Handoff(prefill.sampler, prefill.caches, prefill.first)
        handoff = self.arrivals.pop(rid, None)
        if handoff is None and required:
            raise RuntimeError(f"no device state for request {rid}")
        return handoff

    def _cast(self, state: Handoff) -> None:
        cast(state.caches, self.kv_dtype)  # lanes may hold the model in different precisions

    # ---- after commit -----------------------------------------------------------
    def release(self, requests: list[Request]) -> None:
        """Finished requests leave the batch; their KV goes to the prefix cache."""
        if not requests:
            return
        rows = {r.request_id: i for i, r in enumerate(self.batch.requests)}
        gone: set[int] = set()
        for request in requests:
            state = self._take(request, rows, gone)
            if state is not None:
                self._cache(request, state)
        if gone:
            self.batch.keep([i for i in range(len(self.batch)) if i not in gone])

    def _cache(self, request: Request, state: Handoff) -> None:
        try:
            self.prefix_cache.insert(request.all_ids, state.caches)
            disk = self.prefix_cache.disk
            if disk is not None and state.caches and state.caches[0].keys is not None:
                # The writer thread slices and writes; it gets scheduled
                # arrays (a batch row's extract is lazy until now), which it
                # waits for on its own stream: the lane does not wait here.
                layers = [(c.keys, c.values) for c in state.caches]
                (mx.eval if self.prefix_cache.wait_inserts else mx.async_eval)(layers)
                disk.save(request.all_ids[:state.caches[0].offset], layers,
                          request.tab_id or "")
        except Exception:  # caching is an optimisation; never fail a request on it
            import traceback
            traceback.print_exc()

    def drop_all(self) -> None:
        """Free every request's device state (the lane failed or is closing)."""
        self.prefills.clear()
        self.arrivals.clear()
        self.batch = DecodeBatch(self.model, self.solo_decode)

    def unload(self) -> None:
        """Drop the model (the engine is closed)."""
        self.drop_all()
        self.model = None
        self.batch = DecodeBatch(None)
