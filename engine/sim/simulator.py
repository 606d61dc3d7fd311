"""SIMULATION: Tandem's production scheduler in virtual time.

Each simulated lane is the production `LaneScheduler` with a `SimRunner`
(engine/sim/runner.py) in place of the model; lanes are routed by the
production `Director` and policies. Admission, chunked prefill, batching,
when migrations are considered, the prefix cache and the router's online cost
learning are the engine's own code; only step times (from a cost profile) and
the clock are simulated. Numbers from here are never measured speed.
"""

from __future__ import annotations

import heapq
import itertools
import random
import statistics
from dataclasses import dataclass, field

from ..core.director import Director
from ..core.events import Finished, Migrated, Routed
from ..core.laneconfig import LaneConfig
from ..core.params import SamplingParams
from ..core.request import Request
from ..core.scheduler import LaneScheduler
from ..core.settle import settle
from ..core.step import StepPlan, StepResult
from .drafts import DraftCost, SimDrafting
from .profiles import SimLaneSpec
from .remote import SimRemote, SimRemoteSpec
from .runner import STOP_TOKEN, SimPrefix, SimRunner, answer_token
from .workload import Tab

SYSTEM_TOKENS = 180  # the shared system prompt
TEMPLATE_TOKENS = 8  # chat-template tokens around each message
BLOCK = 16  # prefix-cache block size, as in the engine
CONTEXT = 32_768


@dataclass(slots=True, frozen=True)
class TraceRequest:
    """A recorded request to replay: when it came, its prompt, how long its
    answer was (the stop token ends it there) and its max_tokens."""

    arrival_s: float
    prompt_ids: tuple[int, ...]
    answer_tokens: int
    max_tokens: int = 512
    tab_id: str | None = None


@dataclass(slots=True, eq=False)
class SimRequest:
    """One finished simulated request (virtual seconds)."""

    rid: str
    tab: str
    arrival: float
    prompt: int
    cached: int
    target: int
    output: int
    first_token_at: float | None
    finished_at: float
    lanes: list[tuple[str, str]] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class SimLane:
    scheduler: LaneScheduler
    runner: SimRunner
    step: tuple[StepPlan, StepResult] | None = None
    step_end: float | None = None
    busy_s: float = 0.0
    batch_time: float = 0.0  # integral of decode batch size over time
    context_time: float = 0.0  # integral of the batch's summed context over time

    @property
    def name(self) -> str:
        return self.scheduler.name


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
        values = sorted(v for r in self.requests if (v := _metric(r, name)) is not None)
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
    """Run `tabs` through the production scheduler on lanes built from `lanes`."""

    def __init__(self, lanes: list[SimLaneSpec], policy, mode: str = "hybrid",
                 migration_s: float = 0.0, config: LaneConfig | None = None,
                 prefix_cache_bytes: int = 2 << 30, kv_bytes_per_token: int = 12_288,
                 max_tokens: int = 512, seed: int = 0,
                 remotes: list[SimRemoteSpec] = (), drafts: tuple | None = None):
        """`drafts`: (acceptance, {lane name: DraftCost}) to simulate drafting
        (engine/sim/drafts.py: the production DraftPlanner decides), None:
        no lane drafts."""
        self.now = 0.0
        self.policy = policy
        self.migration_s = migration_s
        self.max_tokens = max_tokens
        self.director = Director(policy, self._on_event, CONTEXT, {STOP_TOKEN}, mode,
                                 clock=lambda: self.now)
        self.prefix = SimPrefix(BLOCK, prefix_cache_bytes, kv_bytes_per_token)
        self._targets: dict[str, int] = {}
        self.lanes: list[SimLane] = []
        for spec in lanes:
            scheduler = LaneScheduler(spec.name, spec.device, self.director, self.prefix,
                                      config, clock=lambda: self.now)
            scheduler.cost = spec.cost.copy()  # the router's belief, learned online
            scheduler.cost.contention = spec.cost.contention
            runner = SimRunner(spec.cost, lambda r: self._targets[r.request_id], self.prefix)
            if drafts is not None:
                acceptance, costs = drafts
                runner.drafting = SimDrafting(acceptance, costs.get(spec.name, DraftCost()),
                                              {STOP_TOKEN}, CONTEXT, runner.truth)
            self.lanes.append(SimLane(scheduler, runner))
            self.director.add_lane(scheduler)
        # Remote lanes (engine/sim/remote.py): the production RemoteScheduler
        # in front of a simulated server.
        self.remotes = [SimRemote.build(spec, self.director, self._answer_length,
                                        self._answer_ids, lambda: self.now)
                        for spec in remotes]
        self._rng = random.Random(seed)
        self._arrivals: list = []
        self._seq = itertools.count()
        self._tabs: dict[str, Tab] = {}
        self._history: dict[str, list[int]] = {}  # tab -> token ids of its conversation
        self._next_turn: dict[str, int] = {}
        self._requests: dict[str, Request] = {}
        self._system = [10 + i for i in range(SYSTEM_TOKENS)]
        self.decisions: list[tuple[float, str, str, str, str]] = []
        self.migrations = 0
        self.done: list[SimRequest] = []

    def _answer_length(self, request: Request) -> int:
        return self._targets[request.request_id]

    @staticmethod
    def _answer_ids(request: Request, n: int) -> list[int]:
        return [answer_token(request, i) for i in range(1, n)] + [STOP_TOKEN]

    # ---- workload -------------------------------------------------------------------
    def _schedule_turn(self, tab: Tab, at: float) -> None:
        k = self._next_turn.get(tab.tab_id, 0)
        if k < len(tab.turns):
            heapq.heappush(self._arrivals, (at + tab.turns[k].think_s * (k > 0),
                                            next(self._seq), tab.tab_id))

    def _tokens(self, n: int) -> list[int]:
        return [self._rng.randrange(1_000, 1_000_000) for _ in range(n)]

    def _arrive(self, tab_id: str) -> None:
        tab = self._tabs[tab_id]
        k = self._next_turn.get(tab_id, 0)
        self._next_turn[tab_id] = k + 1
        turn = tab.turns[k]
        history = self._history.get(tab_id) or self._system + self._tokens(TEMPLATE_TOKENS)
        prompt = history + self._tokens(turn.user_tokens + TEMPLATE_TOKENS)
        request = Request(prompt_ids=prompt, params=SamplingParams(max_tokens=self.max_tokens),
                          tab_id=tab_id, submitted_at=self.now)
        self._submit(request, min(turn.answer_tokens, self.max_tokens))

    def _submit(self, request: Request, answer_tokens: int) -> None:
        request.cached_tokens = self.prefix.cached_length(request.prompt_ids,
                                                          limit=request.num_prompt - 1)
        self._targets[request.request_id] = answer_tokens
        self._requests[request.request_id] = request
        lane, routed = self.director.place(request)
        self._on_event(routed)
        lane.enqueue(request)

    # ---- events from the production code -----------------------------------------------
    def _on_event(self, event) -> None:
        if isinstance(event, Routed):
            self.decisions.append((event.time, event.request_id, event.phase, event.lane,
                                   event.reason))
        elif isinstance(event, Migrated):
            self.migrations += 1
            self.decisions.append((event.time, event.request_id, "migrate", event.to_lane,
                                   event.reason))
        elif isinstance(event, Finished):
            self._finished(self._requests.pop(event.request_id), event)

    def _finished(self, request: Request, event: Finished) -> None:
        if request.tab_id not in self._tabs:  # a replayed trace: no next turn
            self.done.append(SimRequest(
                request.request_id, request.tab_id, request.submitted_at, request.num_prompt,
                request.cached_tokens, self._targets.pop(request.request_id),
                request.num_output, request.first_token_at, event.time,
                list(request.lane_history)))
            return
        self.done.append(SimRequest(
            request.request_id, request.tab_id, request.submitted_at, request.num_prompt,
            request.cached_tokens, self._targets.pop(request.request_id), request.num_output,
            request.first_token_at, event.time, list(request.lane_history)))
        # The next turn re-renders this answer, its end-of-turn token included
        # (chat templates close a turn with the model's stop token).
        self._history[request.tab_id] = request.all_ids + self._tokens(TEMPLATE_TOKENS)
        self._schedule_turn(self._tabs[request.tab_id], self.now)

    # ---- lane steps ---------------------------------------------------------------------
    def _start_step(self, lane: SimLane) -> None:
        if lane.scheduler.is_idle:
            return
        plan = lane.scheduler.schedule()
        if not (plan.has_work or plan.moves or plan.joins or plan.cancelled or plan.events):
            return  # nothing can run yet (a request waits for KV room)
        result = lane.runner.run(plan)
        if plan.moves:
            result.seconds += self.migration_s
        lane.step, lane.step_end = (plan, result), self.now + result.seconds
        lane.busy_s += result.seconds
        lane.batch_time += len(plan.decode) * result.seconds
        lane.context_time += plan.context * len(plan.decode) * result.seconds

    def _end_step(self, lane: SimLane) -> None:
        (plan, result), lane.step, lane.step_end = lane.step, None, None
        outcome = lane.scheduler.commit(plan, result)
        settle(lane.scheduler, plan, outcome, self.director.hand_over, lane.runner.release)

    # ---- main loop ----------------------------------------------------------------------
    def run(self, tabs: list[Tab], limit_s: float = 36_000.0) -> SimResult:
        """Play a multi-tab chat workload (each answer schedules the tab's next turn)."""
        self._tabs = {t.tab_id: t for t in tabs}
        for tab in tabs:
            heapq.heappush(self._arrivals, (tab.start_s, next(self._seq), tab.tab_id))
        return self._loop(min((t.start_s for t in tabs), default=0.0), limit_s)

    def replay(self, trace: list[TraceRequest], limit_s: float = 36_000.0) -> SimResult:
        """Replay recorded requests at their arrival times; results in trace order."""
        for i, item in enumerate(trace):
            heapq.heappush(self._arrivals, (item.arrival_s, next(self._seq), i))
        self._trace = trace
        self._trace_ids: dict[str, int] = {}
        result = self._loop(min((t.arrival_s for t in trace), default=0.0), limit_s)
        order = {rid: i for rid, i in self._trace_ids.items()}
        result.requests.sort(key=lambda r: order[r.rid])
        return result

    def _replay_arrival(self, index: int) -> None:
        item = self._trace[index]
        request = Request(prompt_ids=list(item.prompt_ids),
                          params=SamplingParams(max_tokens=item.max_tokens),
                          tab_id=item.tab_id, submitted_at=self.now)
        self._trace_ids[request.request_id] = index
        self._submit(request, min(item.answer_tokens, item.max_tokens))

    def _loop(self, first_arrival: float, limit_s: float) -> SimResult:
        while self.now < limit_s:
            next_arrival = self._arrivals[0][0] if self._arrivals else float("inf")
            ends = [lane.step_end for lane in self.lanes if lane.step_end is not None]
            ends += [remote.next_event() for remote in self.remotes]
            next_end = min(ends) if ends else float("inf")
            if next_arrival == float("inf") and next_end == float("inf"):
                break
            for remote in self.remotes:
                remote.advance(min(next_arrival, next_end))
            if next_arrival <= next_end:
                self.now = next_arrival
                _, _, key = heapq.heappop(self._arrivals)
                if isinstance(key, int):
                    self._replay_arrival(key)
                else:
                    self._arrive(key)
            else:
                self.now = next_end
                for lane in self.lanes:
                    if lane.step_end is not None and lane.step_end <= self.now:
                        self._end_step(lane)
                for remote in self.remotes:
                    remote.fire(self.now)
            for lane in self.lanes:
                if lane.step_end is None:
                    self._start_step(lane)
            for remote in self.remotes:
                remote.dispatch(self.now)
        makespan = max((r.finished_at for r in self.done), default=0.0) - first_arrival
        return SimResult(
            policy=getattr(self.policy, "name", type(self.policy).__name__),
            mode=self.director.mode, requests=self.done, makespan_s=makespan,
            lane_busy_s={**{lane.name: lane.busy_s for lane in self.lanes},
                         **{remote.name: remote.busy_s for remote in self.remotes}},
            mean_decode_batch={lane.name: lane.batch_time / lane.busy_s if lane.busy_s else 0.0
                               for lane in self.lanes},
            mean_decode_context={lane.name: lane.context_time / lane.batch_time
                                 if lane.batch_time else 0.0 for lane in self.lanes},
            migrations=self.migrations, decisions=self.decisions)
