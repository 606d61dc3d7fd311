"""Does the simulator speak for the engine? Replay one trace through real
lanes and through the SIMULATION, and compare their routing decisions.

`record(engine, plan)` submits requests to a real engine at their planned
times and returns the trace it ran (actual submit times, prompts, answer
lengths) with each request's decisions; `fitted_lanes(costs)` builds
simulated lanes from the real lanes' cost models; `agreement` compares the
two runs request by request. Plain Python over the engine's public API.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from ..core.costmodel import CostModel
from ..core.events import Migrated, Routed
from ..core.params import SamplingParams
from .profiles import SimLaneSpec
from .simulator import SimResult, TraceRequest

Decision = tuple[str, str]  # (phase, lane): ("prefill", "gpu"), ("decode", "cpu"), ("migrate", "gpu")


@dataclass(slots=True, frozen=True)
class PlannedRequest:
    delay_s: float  # after the start of the run
    prompt_ids: tuple[int, ...]
    max_tokens: int


def decision_of(event) -> tuple[str, Decision] | None:
    if isinstance(event, Routed):
        return event.request_id, (event.phase, event.lane)
    if isinstance(event, Migrated):
        return event.request_id, ("migrate", event.to_lane)
    return None


def decisions_of(engine) -> tuple[Callable[[str], list[Decision]], Callable[[], None]]:
    """Collect `engine`'s decisions: (a request's decisions so far, unsubscribe)."""
    decisions: dict[str, list[Decision]] = {}
    lock = threading.Lock()

    def on_event(event) -> None:
        found = decision_of(event)
        if found is not None:
            with lock:
                decisions.setdefault(found[0], []).append(found[1])

    def of(request_id: str) -> list[Decision]:
        with lock:
            return list(decisions.get(request_id, []))
    return of, engine.subscribe(on_event)


def record(engine, plan: list[PlannedRequest],
           timeout_s: float = 120.0) -> tuple[list[TraceRequest], list[list[Decision]]]:
    """Run `plan` on a real engine; the trace it ran and each request's decisions."""
    collected, unsubscribe = decisions_of(engine)
    pause = threading.Event()  # waits for the next planned arrival
    started = time.monotonic()
    submitted = []
    try:
        for item in plan:
            pause.wait(max(0.0, started + item.delay_s - time.monotonic()))
            at = time.monotonic() - started
            handle = engine.submit(prompt_ids=list(item.prompt_ids),
                                   params=SamplingParams(max_tokens=item.max_tokens))
            submitted.append((at, item, handle))
        results = [(at, item, handle.result(timeout_s)) for at, item, handle in submitted]
    finally:
        unsubscribe()
    trace = [TraceRequest(at, item.prompt_ids, done.output_tokens, item.max_tokens)
             for at, item, done in results]
    return trace, [collected(handle.request_id) for _, _, handle in submitted]


def fit(engine, warm_up: list[PlannedRequest]) -> list[SimLaneSpec]:
    """Simulated lanes fitted to `engine`'s real lanes: run `warm_up` so each
    lane's cost model learns its real step times online, then freeze them
    (both routers decide from the same beliefs) and empty the prefix cache
    (the replay starts with an empty one). The lanes' models are the
    simulated lanes' step times, in the engine's lane order."""
    record(engine, warm_up)
    engine.prefix_cache.clear()
    lanes = []
    for name, lane in engine.lanes.items():
        lane.cost.smoothing = 0.0  # no more online learning
        lanes.append(SimLaneSpec(name, lane.kind, lane.cost.copy()))
    return lanes


def simulated_decisions(result: SimResult) -> list[list[Decision]]:
    """Each replayed request's decisions, in trace order."""
    by_request: dict[str, list[Decision]] = {}
    for _, rid, phase, lane, _ in result.decisions:
        by_request.setdefault(rid, []).append((phase, lane))
    return [by_request.get(r.rid, []) for r in result.requests]


def agreement(real: list[list[Decision]], sim: list[list[Decision]]) -> tuple[float, float]:
    """(requests whose decisions all agree, decisions that agree position by
    position), as fractions."""
    if not real:
        return 1.0, 1.0
    whole = sum(a == b for a, b in zip(real, sim)) / len(real)
    total = sum(max(len(a), len(b)) for a, b in zip(real, sim))
    same = sum(x == y for a, b in zip(real, sim) for x, y in zip(a, b))
    return whole, (same / total if total else 1.0)
