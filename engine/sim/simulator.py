"""SIMULATION: lanes in virtual time, stepped as the real lanes step (chunked
prefill, one decode token per running request per step, joins between steps),
with step times from cost profiles, routed by the real policies."""

from __future__ import annotations

import heapq
import itertools
import statistics
from collections import deque
from dataclasses import dataclass, field

from ..router import LaneView, RequestView, eligible_lanes
from .profiles import SimLaneSpec
from .workload import Tab

SYSTEM_TOKENS = 180  # the shared system prompt
TEMPLATE_TOKENS = 8  # chat-template tokens around each message
BLOCK = 16  # prefix-cache block size, as in the engine


@dataclass(slots=True, eq=False)
class SimRequest:
    rid: str
    tab: str
    arrival: float
    prompt: int
    cached: int
    target: int  # output tokens this answer will have
    computed: int = 0
    output: int = 0
    first_token_at: float | None = None
    finished_at: float | None = None
    lanes: list[tuple[str, str]] = field(default_factory=list)
    tokens_at_last_move: int = 0

    def note(self, phase: str, lane: str) -> None:
        if not self.lanes or self.lanes[-1] != (phase, lane):
            self.lanes.append((phase, lane))


@dataclass(slots=True, eq=False)
class SimLane:
    spec: SimLaneSpec
    chunk_busy: int = 128
    chunk_idle: int = 1024
    max_batch: int = 64
    waiting: deque = field(default_factory=deque)
    prefilling: list = field(default_factory=list)
    decoding: list = field(default_factory=list)
    step_end: float | None = None
    step_decode: list = field(default_factory=list)
    step_prefill: list = field(default_factory=list)  # (request, tokens)
    busy_s: float = 0.0
    batch_time: float = 0.0  # integral of decode batch size over time
    context_time: float = 0.0  # integral of the batch's summed context over time

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(slots=True)
class SimResult:
    """Metrics of one simulated run (virtual seconds)."""

    policy: str
    mode: str
    requests: list[SimRequest]
    makespan_s: float
    lane_busy_s: dict[str, float]
    mean_decode_batch: dict[str, float]
    mean_decode_context: dict[str, float]
    migrations: int
    decisions: list[tuple[float, str, str, str, str]]  # (time, request, phase, lane, reason)

    @property
    def output_tokens(self) -> int:
        return sum(r.output for r in self.requests)

    @property
    def throughput(self) -> float:
        return self.output_tokens / self.makespan_s

    def stat(self, name: str) -> dict[str, float]:
        values = sorted(_metric(r, name) for r in self.requests if _metric(r, name) is not None)
        if not values:
            return {"mean": float("nan"), "p50": float("nan"), "p95": float("nan")}
        p95 = values[min(len(values) - 1, int(round(0.95 * (len(values) - 1))))]
        return {"mean": statistics.fmean(values), "p50": statistics.median(values), "p95": p95}


def _metric(r: SimRequest, name: str) -> float | None:
    if name == "ttft":
        return r.first_token_at - r.arrival if r.first_token_at is not None else None
    if name == "tpot":
        if r.output < 2 or r.first_token_at is None:
            return None
        return (r.finished_at - r.first_token_at) / (r.output - 1)
    if name == "completion":
        return r.finished_at - r.arrival
    raise ValueError(name)


class Simulation:
    """Run `tabs` through lanes built from `lanes` with `policy` in `mode`."""

    def __init__(self, lanes: list[SimLaneSpec], policy, mode: str = "hybrid",
                 migration_s: float = 0.0, expected_output: int = 170,
                 reconsider_every: int = 8):
        self.lanes = [SimLane(spec) for spec in lanes]
        self.policy = policy
        self.mode = mode
        self.migration_s = migration_s
        self.expected_output = expected_output
        self.reconsider_every = reconsider_every
        self.now = 0.0
        self._ids = itertools.count(1)
        self._arrivals: list = []
        self._seq = itertools.count()
        self.decisions: list = []
        self.migrations = 0
        self.done: list[SimRequest] = []
        self._conversation: dict[str, int] = {}  # tab -> tokens of conversation so far
        self._next_turn: dict[str, int] = {}
        self._system_cached = False
        self._tabs: dict[str, Tab] = {}

    # ---- workload -----------------------------------------------------------
    def _schedule_turn(self, tab: Tab, at: float) -> None:
        k = self._next_turn.get(tab.tab_id, 0)
        if k >= len(tab.turns):
            return
        heapq.heappush(self._arrivals, (at + tab.turns[k].think_s * (k > 0), next(self._seq),
                                        tab.tab_id))

    def _arrive(self, tab_id: str) -> None:
        tab = self._tabs[tab_id]
        k = self._next_turn.get(tab_id, 0)
        self._next_turn[tab_id] = k + 1
        turn = tab.turns[k]
        history = self._conversation.get(tab_id, SYSTEM_TOKENS + TEMPLATE_TOKENS)
        prompt = history + turn.user_tokens + TEMPLATE_TOKENS
        if k == 0:
            cached = SYSTEM_TOKENS // BLOCK * BLOCK if self._system_cached else 0
        else:
            cached = history // BLOCK * BLOCK
        cached = min(cached, prompt - 1)
        request = SimRequest(f"r{next(self._ids)}", tab_id, self.now, prompt, cached,
                             turn.answer_tokens, computed=cached)
        self._conversation[tab_id] = prompt + turn.answer_tokens + TEMPLATE_TOKENS
        placement = self.policy.place(self._request_view(request), self._views())
        self._log(request, "prefill", placement.lane, placement.reason)
        self._lane(placement.lane).waiting.append(request)

    # ---- views for the router ---------------------------------------------
    def _expected_left(self, r: SimRequest) -> int:
        return max(self.expected_output - r.output, 16)

    def _request_view(self, r: SimRequest) -> RequestView:
        return RequestView(r.rid, r.prompt, r.cached, self._expected_left(r), r.output, r.tab,
                           r.output - r.tokens_at_last_move)

    def _view(self, lane: SimLane) -> LaneView:
        decoding = lane.decoding
        pending = sum(r.prompt - r.computed for r in list(lane.waiting) + lane.prefilling)
        mean_ctx = (sum(r.prompt + r.output for r in decoding) / len(decoding)) if decoding else 0.0
        return LaneView(lane.name, lane.spec.device, len(lane.waiting),
                        len(lane.prefilling) + len(decoding), pending, len(decoding), mean_ctx,
                        sum(self._expected_left(r) for r in decoding), lane.chunk_busy,
                        lane.spec.cost)

    def _views(self) -> list[LaneView]:
        return eligible_lanes(self.mode, [self._view(lane) for lane in self.lanes])

    def _lane(self, name: str) -> SimLane:
        return next(lane for lane in self.lanes if lane.name == name)

    def _log(self, r: SimRequest, phase: str, lane: str, reason: str) -> None:
        self.decisions.append((self.now, r.rid, phase, lane, reason))

    # ---- lane steps -----------------------------------------------------------
    def _start_step(self, lane: SimLane) -> None:
        while lane.waiting and len(lane.prefilling) + len(lane.decoding) < lane.max_batch:
            r = lane.waiting.popleft()
            r.note("prefill", lane.name)
            lane.prefilling.append(r)
        if not lane.prefilling and not lane.decoding:
            lane.step_end = None
            return
        budget = lane.chunk_busy if lane.decoding else lane.chunk_idle
        lane.step_prefill = []
        for r in lane.prefilling:
            if budget <= 0:
                break
            n = min(budget, r.prompt - r.computed)
            lane.step_prefill.append((r, n))
            budget -= n
        lane.step_decode = list(lane.decoding)
        contended = any(o.step_end is not None for o in self.lanes if o is not lane)
        batch = len(lane.step_decode)
        ctx = sum(r.prompt + r.output for r in lane.step_decode) / batch if batch else 0.0
        duration = lane.spec.cost.step_s(batch, ctx, sum(n for _, n in lane.step_prefill),
                                         contended)
        lane.step_end = self.now + duration
        lane.busy_s += duration
        lane.batch_time += batch * duration
        lane.context_time += ctx * batch * duration

    def _end_step(self, lane: SimLane) -> None:
        lane.step_end = None
        for r in lane.step_decode:
            if r.finished_at is not None or r not in lane.decoding:
                continue
            r.output += 1
            if r.output >= r.target:
                self._finish(lane, r)
        for r, n in lane.step_prefill:
            r.computed += n
            if r.computed >= r.prompt:
                lane.prefilling.remove(r)
                self._system_cached = True
                r.output = 1
                r.first_token_at = self.now
                if r.output >= r.target:
                    self._finish(lane, r, joined=False)
                    continue
                placement = self.policy.place_decode(self._request_view(r), lane.name,
                                                     self._views())
                self._join(r, placement.lane, placement.reason, moved_from=None
                           if placement.lane == lane.name else lane.name)
        if self.reconsider_every and lane.decoding:
            for r in list(lane.decoding):
                if r.output % self.reconsider_every:
                    continue
                placement = self.policy.reconsider(self._request_view(r), lane.name,
                                                   self._views())
                if placement is not None and placement.lane != lane.name:
                    lane.decoding.remove(r)
                    self._join(r, placement.lane, placement.reason, moved_from=lane.name)

    def _join(self, r: SimRequest, lane_name: str, reason: str, moved_from: str | None) -> None:
        target = self._lane(lane_name)
        if moved_from is not None:
            self.migrations += 1
            r.tokens_at_last_move = r.output
            self._log(r, "migrate", lane_name, reason)
        else:
            self._log(r, "decode", lane_name, reason)
        r.note("decode", lane_name)
        target.decoding.append(r)

    def _finish(self, lane: SimLane, r: SimRequest, joined: bool = True) -> None:
        r.finished_at = self.now
        if joined:
            lane.decoding.remove(r)
        self.done.append(r)
        self._schedule_turn(self._tabs[r.tab], self.now)

    # ---- main loop -------------------------------------------------------------
    def run(self, tabs: list[Tab], limit_s: float = 36_000.0) -> SimResult:
        self._tabs = {t.tab_id: t for t in tabs}
        for tab in tabs:
            heapq.heappush(self._arrivals, (tab.start_s, next(self._seq), tab.tab_id))
        first_arrival = min((t.start_s for t in tabs), default=0.0)
        while self.now < limit_s:
            next_arrival = self._arrivals[0][0] if self._arrivals else float("inf")
            ends = [lane.step_end for lane in self.lanes if lane.step_end is not None]
            next_end = min(ends) if ends else float("inf")
            if next_arrival == float("inf") and next_end == float("inf"):
                break
            if next_arrival <= next_end:
                self.now = next_arrival
                _, _, tab_id = heapq.heappop(self._arrivals)
                self._arrive(tab_id)
            else:
                self.now = next_end
                for lane in self.lanes:
                    if lane.step_end is not None and lane.step_end <= self.now:
                        self._end_step(lane)
            for lane in self.lanes:
                if lane.step_end is None:
                    self._start_step(lane)
        makespan = max((r.finished_at for r in self.done), default=0.0) - first_arrival
        return SimResult(
            policy=getattr(self.policy, "name", type(self.policy).__name__), mode=self.mode,
            requests=self.done, makespan_s=makespan,
            lane_busy_s={lane.name: lane.busy_s for lane in self.lanes},
            mean_decode_batch={lane.name: lane.batch_time / lane.busy_s if lane.busy_s else 0.0
                               for lane in self.lanes},
            mean_decode_context={lane.name: lane.context_time / lane.batch_time
                                 if lane.batch_time else 0.0 for lane in self.lanes},
            migrations=self.migrations, decisions=self.decisions)
