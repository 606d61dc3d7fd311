"""A lane: one device running model steps on its own thread and stream.

A lane owns its waiting queue, its prefilling requests and its decode batch,
and runs one step at a time: a decode token for every running request plus
prefill chunks for new ones, within a token budget so a long prompt never
stalls running decodes for its whole length (chunked prefill).
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from typing import Callable

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import KVCache, make_prompt_cache
from mlx_lm.tokenizer_utils import TokenizerWrapper

from .batch import DecodeBatch
from .calibration import kv_dtype, start_up
from .costmodel import CostModel
from .handoff import Director, Handoff
from .laneconfig import LaneConfig, LaneStats
from .events import Calibrated, EngineErrorEvent, Finished, Token, now
from .prefill import Prefill, run_chunk
from .prefix import PrefixCache
from .priority import lower_thread
from .request import Request, RequestStatus
from .sampling import TokenSampler, sample_rows
from .textstream import TextStream


class Lane:
    """One device's worker. `submit` and `wake` are safe from any thread."""

    def __init__(self, name: str, device: str, model: nn.Module, tokenizer: TokenizerWrapper,
                 prefix_cache: PrefixCache, emit: Callable[[object], None],
                 stop_token_ids: set[int], context_length: int,
                 config: LaneConfig | None = None):
        self.name = name
        self.device = device
        self.kind = device  # the role the router sees (see LaneSpec.acts_as)
        self.calibrated = threading.Event()
        self._stopped = threading.Event()
        self.model = model
        self.tokenizer = tokenizer
        self.prefix_cache = prefix_cache
        self.config = config or LaneConfig()
        self.stats = LaneStats()
        self._emit = emit
        self._stop_ids = stop_token_ids
        self._context_length = context_length
        self._inbox: deque[Request] = deque()
        self._waiting: deque[Request] = deque()
        self._prefilling: list[Prefill] = []
        self._batch = DecodeBatch(model)
        self._adopted: deque[Handoff] = deque()
        self.director: "Director | None" = None  # set by the engine
        self.cost: CostModel | None = None  # calibrated on the lane thread
        # Only the router reads cost models, and with one lane it has no choice
        # to make; the engine skips the ~2-3 s calibration then (faster start).
        self.calibrate_at_start = True
        # Set by the engine with more than one lane: after every lane has
        # calibrated alone, all run decode steps at once to measure contention.
        self.contention_probe: threading.Barrier | None = None
        self.probed = threading.Event()
        self.reconsider_every = 8  # steps between migration checks
        self.nice = 0  # niceness of the lane thread and the MLX stream it starts
        # (batch, context, prefill tokens, other lanes busy when it started)
        self._last_step: tuple[int, float, int, bool] | None = None
        self._wakeup = threading.Condition()
        self._closed = False
        self._kv_dtype = mx.float32  # probed on the lane thread
        self._thread = threading.Thread(target=self._run, name=f"lane-{name}", daemon=True)

    # ---- any thread -------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, request: Request) -> None:
        with self._wakeup:
            self._inbox.append(request)
            self._wakeup.notify()

    def adopt(self, handoff: Handoff) -> None:
        """Take over a decoding request from another lane (any thread)."""
        with self._wakeup:
            self._adopted.append(handoff)
            self._wakeup.notify()

    def wake(self) -> None:
        with self._wakeup:
            self._wakeup.notify()

    def close(self, timeout: float = 10.0) -> None:
        with self._wakeup:
            self._closed = True
            self._wakeup.notify()
        if self._thread.is_alive():
            self._stopped.wait(timeout)

    @property
    def queue_depth(self) -> int:
        return len(self._inbox) + len(self._waiting)

    @property
    def batch_size(self) -> int:
        return len(self._batch) + len(self._prefilling)

    @property
    def pending_prompt_tokens(self) -> int:
        """Prompt tokens still to prefill on this lane (queued + in progress)."""
        queued = sum(r.num_prompt - r.cached_tokens for r in list(self._inbox) + list(self._waiting))
        running = sum(p.request.num_prompt - p.request.num_computed for p in list(self._prefilling))
        return queued + running

    @property
    def kv_bytes(self) -> int:
        """KV bytes of this lane's running requests (as of its last step)."""
        return self.stats.kv_bytes

    def _measure_kv_bytes(self) -> int:
        return self._batch.kv_bytes + sum(sum(c.nbytes for c in p.caches) for p in self._prefilling)

    @property
    def is_idle(self) -> bool:
        return not (self._inbox or self._waiting or self._prefilling or len(self._batch)
                    or self._adopted)

    def decoding_requests(self) -> list[Request]:
        return list(self._batch.requests) + [h.request for h in list(self._adopted)]

    # ---- lane thread ------------------------------------------------------
    def _run(self) -> None:
        lower_thread(self.nice)  # before the stream exists: its thread inherits it
        device = mx.Device(mx.gpu if self.device == "gpu" else mx.cpu)
        stream = mx.new_stream(device)
        with mx.stream(stream):
            self._kv_dtype = kv_dtype(self.model)
            try:
                if self.cost is None and self.calibrate_at_start:
                    self._calibrate()
                elif self.contention_probe is not None:
                    self.contention_probe.abort()  # the others must not wait for us
            finally:
                self.calibrated.set()
                self.probed.set()
            while True:
                with self._wakeup:
                    while not self._closed and self.is_idle:
                        self._last_step = None
                        self._wakeup.wait()
                    if self._closed:
                        break
                    self._waiting.extend(self._inbox)
                    self._inbox.clear()
                    adopted = list(self._adopted)
                    self._adopted.clear()
                started = time.perf_counter()
                try:
                    for handoff in adopted:
                        self._join(handoff.request, handoff.sampler, handoff.caches,
                                   handoff.next_token)
                    self._reap_cancelled()
                    self._admit()
                    if self._prefilling or len(self._batch):
                        self._step()
                except Exception as exc:  # a bug or device failure: fail this lane's work
                    self._fail_all(exc)
                elapsed = time.perf_counter() - started
                self._observe(elapsed)
                self.stats.kv_bytes = self._measure_kv_bytes()
                self.stats.busy_s += time.perf_counter() - started
            self._cancel_everything()
            # Let in-flight async work finish before the stream goes away.
            mx.synchronize(stream)
        self._stopped.set()
        # Park instead of returning: with MLX 0.32 on Linux, a thread that used
        # its own stream can abort the process from its thread-exit destructors
        # ("terminate called without an active exception") when it ends near
        # interpreter shutdown. A parked daemon thread holds no MLX state.
        threading.Event().wait()

    def _admit(self) -> None:
        while self._waiting and len(self._batch) + len(self._prefilling) < self.config.max_batch:
            request = self._waiting[0]  # stays counted in queue_depth until it prefills
            hit = self.prefix_cache.lookup(request.prompt_ids, limit=request.num_prompt - 1,
                                           dtype=self._kv_dtype)
            caches = hit.caches if hit.num_tokens else make_prompt_cache(self.model)
            request.cached_tokens = request.num_computed = hit.num_tokens
            request.status = RequestStatus.PREFILLING
            request.note_lane("prefill", self.name)
            request.text = TextStream(self.tokenizer, request.params.stop)
            self._prefilling.append(Prefill(request, TokenSampler(request.params), caches))
            self._waiting.popleft()

    def _step(self) -> None:
        self.stats.steps += 1
        decoding = len(self._batch) > 0
        fed = self._batch.step() if decoding else None
        fed_requests = list(self._batch.requests)
        budget = self.config.prefill_chunk_busy if decoding else self.config.prefill_chunk
        joins, pending, prefill_tokens = self._prefill(budget)
        if pending:
            mx.async_eval(pending)
        if fed is not None:
            tokens = fed.tolist()
            self._take_tokens(fed_requests, tokens)
        for prefill, first in joins:
            self._prefilling.remove(prefill)
            request = prefill.request
            request.status = RequestStatus.DECODING
            target = self.director.decode_lane_for(request, self) if self.director else self.name
            if target == self.name:
                self._join(request, prefill.sampler, prefill.caches, first)
            else:
                self._send(Handoff(request, prefill.sampler, prefill.caches, first), target)
        if self.director and self.stats.steps % self.reconsider_every == 0:
            self._reconsider()
        batch = len(fed_requests)
        context = (sum(r.num_prompt + r.num_output for r in fed_requests) / batch) if batch else 0.0
        others = self.director.others_busy(self) if self.director else False
        self._last_step = (batch, context, prefill_tokens, others)
        if self.stats.steps % self.config.clear_cache_every == 0:
            mx.clear_cache()

    def _prefill(self, budget: int):
        """Run up to `budget` prompt tokens; return (joins, arrays to evaluate)."""
        joins, pending, total = [], [], 0
        for prefill in list(self._prefilling):
            if budget <= 0:
                break
            request = prefill.request
            n = min(budget, request.num_prompt - request.num_computed)
            logits = run_chunk(self.model, prefill, n)
            request.num_computed += n
            budget -= n
            total += n
            self.stats.tokens += n
            pending.extend(c.state for c in prefill.caches)
            if request.num_computed == request.num_prompt:
                prompt = mx.array(request.prompt_ids, mx.uint32)
                first = sample_rows(logits, [prefill.sampler], lambda _: prompt)
                pending.append(first)
                joins.append((prefill, first))  # leaves _prefilling when it joins
        return joins, pending, total

    def _join(self, request: Request, sampler: TokenSampler, caches: list[KVCache],
              first: mx.array) -> None:
        if caches and caches[0].keys is not None and caches[0].keys.dtype != self._kv_dtype:
            for c in caches:  # lanes may hold the model in different precisions
                c.keys, c.values = c.keys.astype(self._kv_dtype), c.values.astype(self._kv_dtype)
        request.status = RequestStatus.DECODING
        request.note_lane("decode", self.name)
        self._batch.add(request, sampler, caches, first)

    def _send(self, handoff: Handoff, target: str) -> None:
        """Give a request to another lane: its state is evaluated here first."""
        mx.eval([c.state for c in handoff.caches], handoff.next_token)
        self.director.hand_off(handoff, target)

    def _reconsider(self) -> None:
        moves = []
        for index, request in enumerate(self._batch.requests):
            if request.is_cancelled:
                continue
            target = self.director.move_for(request, self)
            if target is not None and target != self.name:
                moves.append((index, request, target))
        if not moves:
            return
        leaving = {index for index, _, _ in moves}
        for index, request, target in moves:
            caches, token = self._batch.extract(index), self._batch.pending_token(index)
            request.output_at_last_move = request.num_output
            self._send(Handoff(request, self._batch.samplers[index], caches, token), target)
        self._batch.keep([i for i in range(len(self._batch)) if i not in leaving])

    def _observe(self, seconds: float) -> None:
        """Refine the cost model with the step just measured."""
        step, self._last_step = self._last_step, None
        if step is None or self.cost is None:
            return
        batch, context, prefill_tokens, at_start = step
        at_end = self.director.others_busy(self) if self.director else False
        if at_start != at_end:
            return  # other lanes ran for part of this step only: it says nothing clear
        self.cost.observe(batch, context, prefill_tokens, seconds, contended=at_end)

    def _calibrate(self) -> None:
        cost, seconds = start_up(self.model, self.calibrated, self.contention_probe)
        self.cost = cost
        self._emit(Calibrated(self.name, self.device, prefill_tps=cost.prefill_tps,
                              decode_tps=cost.decode_points[0][1],
                              batch_alpha=cost.batch_alpha, seconds=seconds,
                              contention=cost.contention))

    def _take_tokens(self, requests: list[Request], tokens: list[int]) -> None:
        keep = []
        t = now()
        for index, (request, token) in enumerate(zip(requests, tokens)):
            if request.first_token_at is None:
                request.first_token_at = t
            request.output_ids.append(token)
            self.stats.output_tokens += 1
            self.stats.tokens += 1
            reason = self._finish_reason(request, token)
            if token not in self._stop_ids:  # a stop token is never shown; the last token is
                stream = request.text
                text = stream.add(token)
                if stream.stopped:
                    reason = "stop"
                self._emit(Token(request.request_id, request.tab_id, token, text, self.name, t))
            if reason is None and request.is_cancelled:
                reason = "cancelled"
            if reason is None:
                keep.append(index)
            else:
                self._finish(request, reason, self._batch.extract(index))
        self._batch.keep(keep)

    def _finish_reason(self, request: Request, token: int) -> str | None:
        if token in self._stop_ids:
            return "stop"
        if request.num_output >= request.params.max_tokens:
            return "length"
        if request.num_prompt + request.num_output >= self._context_length:
            return "length"
        return None

    def _finish(self, request: Request, reason: str, caches: list[KVCache] | None,
                error: str | None = None) -> None:
        if caches:
            try:
                self.prefix_cache.insert(request.all_ids, caches)
            except Exception:  # caching is an optimisation; never fail a request on it
                traceback.print_exc()
        stream, request.text = request.text, None
        tail = stream.finish() if stream is not None and reason != "cancelled" else ""
        if tail:
            self._emit(Token(request.request_id, request.tab_id, -1, tail, self.name))
        text = stream.text if stream is not None else ""
        request.status = RequestStatus.FINISHED
        request.finish_reason = reason
        end = now()
        ttft = request.first_token_at - request.submitted_at if request.first_token_at else None
        tpot = None
        if request.first_token_at and request.num_output > 1:
            tpot = (end - request.first_token_at) / (request.num_output - 1)
        self._emit(Finished(
            request.request_id, request.tab_id, reason=reason, text=text,
            prompt_tokens=request.num_prompt, cached_tokens=request.cached_tokens,
            output_tokens=request.num_output, ttft_s=ttft, time_per_output_token_s=tpot,
            e2e_s=end - request.submitted_at, lanes=tuple(request.lane_history), error=error))

    def _reap_cancelled(self) -> None:
        for request in [r for r in self._waiting if r.is_cancelled]:
            self._waiting.remove(request)
            self._finish(request, "cancelled", None)
        for prefill in [p for p in self._prefilling if p.request.is_cancelled]:
            self._prefilling.remove(prefill)
            computed = prefill.caches if prefill.request.num_computed else None
            self._finish(prefill.request, "cancelled", computed)
        cancelled = [i for i, r in enumerate(self._batch.requests) if r.is_cancelled]
        if cancelled:
            # The pending token of a cancelled request is dropped unread.
            for i in cancelled:
                self._finish(self._batch.requests[i], "cancelled", self._batch.extract(i))
            self._batch.keep([i for i in range(len(self._batch)) if i not in cancelled])

    def _fail_all(self, exc: Exception) -> None:
        message = f"{self.name} lane failed: {type(exc).__name__}: {exc}"
        traceback.print_exc()
        self._emit(EngineErrorEvent("", None, message=message))
        requests = [p.request for p in self._prefilling] + list(self._batch.requests)
        self._prefilling.clear()
        self._batch = DecodeBatch(self.model)
        for request in requests:
            self._finish(request, "error", None, error=message)

    def _cancel_everything(self) -> None:
        for request in list(self._waiting) + list(self._inbox):
            self._finish(request, "cancelled", None)
        for prefill in self._prefilling:
            self._finish(prefill.request, "cancelled", None)
        for request in self._batch.requests:
            self._finish(request, "cancelled", None)
        self._waiting.clear()
        self._inbox.clear()
        self._prefilling.clear()
        self._batch = DecodeBatch(self.model)
