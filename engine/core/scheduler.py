"""A lane's scheduler: plain Python over request states, never a tensor.

Per lane: which requests wait, prefill, decode, arrive from or leave for other
lanes, and what the next step runs. `schedule()` returns a `StepPlan`; a
runner executes it; `commit()` takes the `StepResult` back. The same class
schedules a real lane (engine/runtime/lane.py) and a simulated one (engine/sim/), so
simulated results speak for the production scheduler.

Admission is by KV bytes as well as batch slots: mlx-lm's batch cache pads
every row to the longest, so a lane whose active requests reserve at most T
positions each (prompt + max_tokens, capped at the context) holds at most
`n * T * kv_bytes_per_token` bytes of KV; a request is admitted only while
that stays within the lane's KV budget (engine/core/memory.py plans it). A
request without max_tokens reserves as it grows (engine/core/reservation.py):
when the lane has no room for its next share it ends, `length`.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Callable, Protocol

from .costmodel import CostModel
from .events import Queued, now
from .laneconfig import MIN_PREFILL_CHUNK, LaneConfig, LaneStats
from .memory import format_bytes
from .prefix_trie import PrefixIndex
from .request import Request, RequestStatus
from .reservation import grown, needs_more
from .router import LaneView
from .step import Admission, PrefillChunk, StepOutcome, StepPlan, StepResult


class Routing(Protocol):
    """What a lane's scheduler asks of the director (engine/core/director.py), which
    knows every lane: the schedulers never see each other."""

    lock: threading.RLock  # guards every scheduler's lists
    stop_token_ids: set[int]
    context_length: int

    def others_busy(self, name: str) -> bool:
        """Whether a lane other than `name` has work."""

    def place_decode(self, request: Request, current: str) -> tuple[str, object]:
        """(the lane where a request prefilled on `current` decodes, the event)."""

    def reconsider(self, request: Request, current: str) -> tuple[str | None, object]:
        """(a lane to move a decoding request to, or None; the event)."""


class LaneScheduler:
    """What one lane runs next. Its lists are guarded by the director's lock,
    which every scheduler of an engine shares (planning is a few microseconds;
    the model runs outside the lock)."""

    def __init__(self, name: str, kind: str, director: Routing, prefix: PrefixIndex,
                 config: LaneConfig | None = None, device: str | None = None,
                 kv_bytes_per_token: int = 0, kv_budget_bytes: int | None = None,
                 clock: Callable[[], float] = now):
        self.name = name
        self.kind = kind  # the role the router sees ("gpu" / "cpu")
        self.device = device or kind
        self.director = director
        self.prefix = prefix
        self.config = config or LaneConfig()
        self.kv_bytes_per_token = kv_bytes_per_token
        self.kv_budget_bytes = kv_budget_bytes
        self.clock = clock
        self.lock: threading.RLock = director.lock
        self.stats = LaneStats()
        self.cost: CostModel | None = None
        self.reconsider_every = 8  # steps between migration checks
        self.failed: str | None = None  # why the lane stopped, if it failed
        self.closed = False
        self.warming_up = False  # still calibrating: routed to only if no lane is ready
        self.measured_prefill_tps: float | None = None  # without a cost model (one lane)
        self.waiting: deque[Request] = deque()
        self.prefilling: list[Request] = []
        self.prefilled: list[Request] = []  # decode lane decided at the next plan
        self.arriving: list[Request] = []  # handed over by another lane
        self.running: list[Request] = []  # the decode batch, in the runner's order

    # ---- state the router and the engine read ---------------------------------
    @property
    def is_open(self) -> bool:
        return not self.closed and self.failed is None

    @property
    def is_idle(self) -> bool:
        return not (self.waiting or self.prefilling or self.prefilled or self.arriving
                    or self.running)

    @property
    def is_prefilling(self) -> bool:
        """Its steps carry prompt chunks."""
        return bool(self.prefilling)

    def active(self) -> list[Request]:
        """Requests holding KV on this lane."""
        return self.prefilling + self.prefilled + self.arriving + self.running

    @property
    def queue_depth(self) -> int:
        return len(self.waiting)

    @property
    def batch_size(self) -> int:
        return len(self.active())

    @property
    def prefill_left(self) -> int:
        """Prompt tokens still to prefill here (queued and in progress)."""
        return (sum(r.num_prompt - r.cached_tokens for r in self.waiting)
                + sum(r.num_prompt - r.num_computed for r in self.prefilling))

    def decoding(self) -> list[Request]:
        return self.running + self.arriving

    def view(self, expected_left: Callable[[Request], int]) -> LaneView:
        with self.lock:
            decoding = self.decoding()
            pending = (sum(r.num_prompt - r.cached_tokens for r in self.waiting)
                       + sum(r.num_prompt - r.num_computed for r in self.prefilling))
            mean_ctx = (sum(r.num_prompt + r.num_output for r in decoding) / len(decoding)
                        if decoding else 0.0)
            return LaneView(self.name, self.kind, len(self.waiting), self.batch_size, pending,
                            len(decoding), mean_ctx, float(sum(map(expected_left, decoding))),
                            self.config.prefill_chunk_busy, self.cost,
                            max_batch=self.config.max_batch)

    # ---- KV room: query / commit pairs -------------------------------------------
    def kv_bytes_for(self, requests: list[Request]) -> int:
        """Bytes of KV `requests` may reach together in a padded batch."""
        if not requests:
            return 0
        return len(requests) * max(r.kv_tokens for r in requests) * self.kv_bytes_per_token

    def fits_alone(self, request: Request) -> bool:
        return (self.kv_budget_bytes is None
                or self.kv_bytes_for([request]) <= self.kv_budget_bytes)

    def can_take(self, request: Request) -> bool:
        """Room for `request`'s KV beside everything active here now."""
        return (self.kv_budget_bytes is None
                or self.kv_bytes_for(self.active() + [request]) <= self.kv_budget_bytes)

    def can_admit(self, request: Request) -> bool:
        return len(self.active()) < self.config.max_batch and self.can_take(request)

    def admit(self, request: Request, plan: StepPlan) -> None:
        self.waiting.remove(request)
        match = self.prefix.match(request.prompt_ids, limit=request.num_prompt - 1)
        request.cached_tokens = request.num_computed = match.num_tokens
        request.status = RequestStatus.PREFILLING
        request.waiting_for = None
        request.note_lane("prefill", self.name)
        self.prefilling.append(request)
        plan.admitted.append(Admission(request, match))

    def enqueue(self, request: Request) -> bool:
        """A routed request joins this lane's queue (False: the lane is shut)."""
        with self.lock:
            if not self.is_open:
                return False
            request.lane = self.name
            self.waiting.append(request)
            return True

    def close(self) -> None:
        """Take no more work: new requests and hand-overs are refused."""
        with self.lock:
            self.closed = True

    def fail(self, why: str) -> None:
        """The lane failed: it takes no more work and the router passes it by."""
        with self.lock:
            self.failed = why

    def adopt(self, request: Request) -> bool:
        """A decoding request handed over by another lane joins at the next step."""
        with self.lock:
            if not self.is_open:
                return False
            request.lane = self.name
            self.arriving.append(request)
            return True

    # ---- planning ---------------------------------------------------------------
    def schedule(self) -> StepPlan:
        plan = StepPlan()
        with self.lock:
            self._reap_cancelled(plan)
            if self.reconsider_every and (self.stats.steps + 1) % self.reconsider_every == 0:
                self._reconsider(plan)
            self._place_prefilled(plan)
            for request in self.arriving:
                self._join(request, plan)
            self.arriving.clear()
            self._admit(plan)
            plan.decode = list(self.running)
            if plan.decode:
                plan.context = (sum(r.num_prompt + r.num_output for r in plan.decode)
                                / len(plan.decode))
            self._chunk(plan)
            plan.contended = self.director.others_busy(self.name)
            plan.local_contended = self.director.others_busy(self.name, local=True)
            plan.beside_prefill = self.director.others_prefilling(self.name)
        return plan

    def _reap_cancelled(self, plan: StepPlan) -> None:
        for group in (self.waiting, self.prefilling, self.prefilled, self.arriving,
                      self.running):
            gone = [r for r in group if r.is_cancelled]
            for request in gone:
                group.remove(request)
            plan.cancelled.extend(gone)

    def _reconsider(self, plan: StepPlan) -> None:
        for request in list(self.running):
            target, event = self.director.reconsider(request, self.name)
            if target is not None:
                self.running.remove(request)
                self._move(request, target, plan, event)

    def _place_prefilled(self, plan: StepPlan) -> None:
        for request in self.prefilled:
            target, event = self.director.place_decode(request, self.name)
            if target == self.name:
                plan.events.append(event)
                self._join(request, plan)
            else:
                self._move(request, target, plan, event)
        self.prefilled.clear()

    def _move(self, request: Request, target: str, plan: StepPlan, event) -> None:
        request.status = RequestStatus.MOVING
        request.output_at_last_move = request.num_output
        plan.moves.append((request, target))
        plan.events.append(event)

    def _join(self, request: Request, plan: StepPlan) -> None:
        request.status = RequestStatus.DECODING
        request.note_lane("decode", self.name)
        self.running.append(request)
        plan.joins.append(request)

    def _admit(self, plan: StepPlan) -> None:
        while self.waiting and len(self.active()) < self.config.max_batch:
            request = self.waiting[0]
            if not self.can_admit(request):
                self._wait_for_kv(request, plan)
                return
            self.admit(request, plan)

    def _wait_for_kv(self, request: Request, plan: StepPlan) -> None:
        if request.waiting_for is not None:
            return  # said once
        used = self.kv_bytes_for(self.active())
        request.waiting_for = (
            f"waiting for KV room on {self.name.upper()}: the running requests may use "
            f"{format_bytes(used)} of its {format_bytes(self.kv_budget_bytes or 0)}, "
            f"this one needs up to {format_bytes(self.kv_bytes_for([request]))}")
        plan.events.append(Queued(request.request_id, request.tab_id, request.num_prompt,
                                  reason=request.waiting_for, time=self.clock()))

    def prefill_rate(self) -> float | None:
        """Prompt tokens per second this lane prefills at: its cost model's
        belief, else what it measured itself (`measured_prefill_tps`)."""
        if self.cost is not None:
            return self.cost.prefill_tps / max(self.cost.prefill_correction, 1e-6)
        return self.measured_prefill_tps

    def _chunk(self, plan: StepPlan) -> None:
        config = self.config
        budget = config.prefill_chunk_busy if plan.decode else config.prefill_chunk
        rate = self.prefill_rate()
        if not plan.decode and rate and config.prefill_step_s:
            # A prefill step lasts about prefill_step_s, so that a Stop (acted
            # on between steps) or a new request waits no longer than that.
            budget = min(budget, max(MIN_PREFILL_CHUNK, int(rate * config.prefill_step_s)))
        for request in self.prefilling:
            if budget <= 0:
                break
            size = min(budget, request.num_prompt - request.num_computed)
            plan.prefill.append(PrefillChunk(request, request.num_computed, size))
            budget -= size

    # ---- after the step ran -----------------------------------------------------
    def commit(self, plan: StepPlan, result: StepResult) -> StepOutcome:
        outcome = StepOutcome()
        t = self.clock()
        stop_ids = self.director.stop_token_ids
        with self.lock:
            for request in result.failed:  # one request's KV failed, not the lane
                if request in self.prefilling:
                    self.prefilling.remove(request)
                    outcome.finished.append((request, "error"))
            logprobs = result.logprobs or [None] * len(result.tokens)
            for row, (request, token, lp) in enumerate(zip(plan.decode, result.tokens,
                                                           logprobs)):
                if request.failure is not None:  # nothing more of it is shown
                    self.running.remove(request)
                    outcome.finished.append((request, "error"))
                    continue
                if request.first_token_at is None:
                    request.first_token_at = t
                extra = result.extra.get(row, ())
                extra_lps = result.extra_logprobs.get(row) or [None] * len(extra)
                for i, (token, lp) in enumerate(zip([token, *extra], [lp, *extra_lps])):
                    request.output_ids.append(token)
                    reason = self._finish_reason(request, token, stop_ids)
                    outcome.tokens.append((request, token, reason, lp, i > 0))
                    if reason is not None:
                        self.running.remove(request)
                        outcome.finished.append((request, reason))
                        break
            for chunk in plan.prefill:
                request = chunk.request
                if request in result.failed:
                    continue
                request.num_computed += chunk.size
                if chunk.is_last and request in self.prefilling:
                    self.prefilling.remove(request)
                    request.status = RequestStatus.PREFILLED
                    self.prefilled.append(request)
            if plan.has_work:
                self.stats.steps += 1
                accepted = sum(len(x) for x in result.extra.values())
                written = len(result.tokens) + accepted
                self.stats.drafted += result.verified
                self.stats.accepted_drafts += accepted
                self.stats.output_tokens += written
                self.stats.tokens += written + plan.prefill_tokens
                if not result.verified:  # a wider step says nothing of a plain one
                    self._observe(plan, result.seconds)
        return outcome

    def finish(self, requests: list[Request]) -> None:
        """Requests the lane ended after commit (a stop string was seen)."""
        with self.lock:
            for request in requests:
                if request in self.running:
                    self.running.remove(request)

    def _finish_reason(self, request: Request, token: int, stop_ids: set[int]) -> str | None:
        if token in stop_ids:
            return "stop"
        if request.num_output >= request.params.max_tokens:
            return "length"
        if request.num_prompt + request.num_output >= self.director.context_length:
            return "length"
        if not self._reserve_ahead(request):
            return "length"  # no limit was set, but the lane's KV is full
        return None

    def _reserve_ahead(self, request: Request) -> bool:
        """An open-ended request's reservation grows before its next step
        could pass it; False when the lane has no room for that."""
        context = self.director.context_length
        if not needs_more(request, context):
            return True
        before, request.kv_tokens = request.kv_tokens, grown(request, context)
        if self.kv_budget_bytes is None or \
                self.kv_bytes_for(self.active()) <= self.kv_budget_bytes:
            return True
        request.kv_tokens = before
        return False

    def _observe(self, plan: StepPlan, seconds: float) -> None:
        """Refine the cost model with the step just run (without one: the
        measured prefill rate, from steps that only prefilled)."""
        if self.cost is None:
            if plan.prefill_tokens >= MIN_PREFILL_CHUNK and not plan.decode and seconds > 0:
                rate = plan.prefill_tokens / seconds
                old = self.measured_prefill_tps
                self.measured_prefill_tps = rate if old is None else 0.5 * (old + rate)
            return
        contended = self.director.others_busy(self.name)
        beside_prefill = self.director.others_prefilling(self.name)
        if contended != plan.contended or beside_prefill != plan.beside_prefill:
            return  # other lanes ran (or prefilled) for part of this step only: it says little
        self.cost.observe(len(plan.decode), plan.context, plan.prefill_tokens, seconds,
                          contended=contended, beside_prefill=beside_prefill)

    def drain(self) -> list[Request]:
        """Take every request off this lane (it failed or is closing)."""
        with self.lock:
            requests = list(self.waiting) + self.active()
            self.waiting.clear()
            self.prefilling, self.prefilled, self.arriving, self.running = [], [], [], []
            return requests
