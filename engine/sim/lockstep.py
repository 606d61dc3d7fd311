"""SIMULATED TIME, REAL LANES: run an engine's real lanes in virtual time.

A `Lockstep` is the `StepGate` (engine/core/laneconfig.py) of every lane of an
engine. It lets one lane move at a time, in the order the simulator's event
loop (engine/sim/simulator.py) would: requests arrive at their virtual times,
steps end at their virtual end times (each step lasts what the lane's true
cost model says, whatever the real forward pass took), and after each event
the lanes with work plan their next step in lane order. The lanes run the real
model, scheduler, director and prefix cache; only time is simulated. Routing
decisions are then a function of the trace alone, so a test can compare them
with the simulator's without the noise of a shared machine.
"""

from __future__ import annotations

import threading
import time
from dataclasses import fields

from ..core.costmodel import CostModel
from ..core.params import SamplingParams
from ..core.step import StepPlan
from .replay import Decision, PlannedRequest, decisions_of
from .simulator import TraceRequest

_READY, _STEPPING, _IDLE, _ACTIVE = "ready", "stepping", "idle", "active"


def believe(cost: CostModel, truth: CostModel) -> None:
    """Make a lane's cost model (the router's belief) the truth, in place."""
    for f in fields(CostModel):
        value = getattr(truth, f.name)
        setattr(cost, f.name, list(value) if isinstance(value, list) else value)


class Lockstep:
    """The gate of every lane of one engine; `replay` drives them."""

    def __init__(self, truth: dict[str, CostModel], timeout_s: float = 120.0):
        self.truth = truth  # lane name -> its step times
        self.timeout_s = timeout_s
        self.now = 0.0
        self._cond = threading.Condition()
        self._state = {name: _ACTIVE for name in truth}  # until each lane first reports
        self._ends: dict[str, float] = {}  # stepping lane -> virtual end of its step
        self._granted: set[str] = set()
        self._stalled: set[str] = set()  # planned nothing: waits for another event
        self._free = False  # after the replay: lanes run unhindered
        self._lanes: dict[str, object] = {}

    # ---- the gate (lane threads) --------------------------------------------------
    def begin(self, lane: str) -> None:
        with self._cond:
            self._state[lane] = _READY
            self._cond.notify_all()
            self._wait_for(lambda: self._free or lane in self._granted)
            self._granted.discard(lane)
            self._state[lane] = _ACTIVE

    def end(self, lane: str, plan: StepPlan, measured_s: float) -> float:
        truth = self.truth[lane]
        seconds = truth.step_s(len(plan.decode), plan.context, plan.prefill_tokens,
                               plan.local_contended)
        with self._cond:
            if not (plan.has_work or plan.moves or plan.joins or plan.cancelled or plan.events):
                self._stalled.add(lane)  # as the simulator: no step until the next event
                return seconds
            self._ends[lane] = self.now + seconds
            self._state[lane] = _STEPPING
            self._cond.notify_all()
            self._wait_for(lambda: self._free or lane in self._granted)
            self._granted.discard(lane)
            self._ends.pop(lane, None)
            self._state[lane] = _ACTIVE
        return seconds

    def idle(self, lane: str) -> None:
        with self._cond:
            self._state[lane] = _IDLE
            self._cond.notify_all()

    # ---- the conductor (the caller's thread) -------------------------------------------
    def replay(self, engine, plan: list[PlannedRequest]
               ) -> tuple[list[TraceRequest], list[list[Decision]]]:
        """Run `plan` (delays in virtual seconds) on `engine`, whose lanes all
        have this gate; the trace it ran and each request's decisions."""
        self._lanes = dict(engine.lanes)
        assert set(self._lanes) == set(self.truth), "one true cost model per lane"
        collected, unsubscribe = decisions_of(engine)
        arrivals = sorted(range(len(plan)), key=lambda i: (plan[i].delay_s, i))
        handles = []
        try:
            while True:
                self._settle()
                ready = [n for n in self._lanes
                         if self._state[n] == _READY and n not in self._stalled]
                if ready:  # after an event, lanes with work plan in lane order
                    self._grant(ready[0])
                    continue
                next_arrival = plan[arrivals[0]].delay_s if arrivals else float("inf")
                next_end = min(self._ends.values(), default=float("inf"))
                if next_arrival == float("inf") and next_end == float("inf"):
                    break
                self._stalled.clear()
                if next_arrival <= next_end:
                    self.now = max(self.now, next_arrival)
                    item = plan[arrivals.pop(0)]
                    handles.append((self.now, item, engine.submit(
                        prompt_ids=list(item.prompt_ids),
                        params=SamplingParams(max_tokens=item.max_tokens))))
                else:
                    self.now = next_end
                    for name in [n for n in self._lanes if self._ends.get(n, 1e300) <= self.now]:
                        self._grant(name)
                        self._settle()
            results = [(at, item, handle.result(self.timeout_s)) for at, item, handle in handles]
        finally:
            unsubscribe()
            with self._cond:
                self._free = True
                self._cond.notify_all()
        trace = [TraceRequest(at, item.prompt_ids, done.output_tokens, item.max_tokens)
                 for at, item, done in results]
        return trace, [collected(handle.request_id) for _, _, handle in handles]

    def _grant(self, lane: str) -> None:
        with self._cond:
            self._granted.add(lane)
            self._state[lane] = _ACTIVE
            self._cond.notify_all()

    def _settle(self) -> None:
        """Wait until no lane moves: each is ready, stepping, or idle with no work."""
        def still() -> bool:
            return all(self._state[n] in (_READY, _STEPPING)
                       or (self._state[n] == _IDLE and lane.is_idle)
                       for n, lane in self._lanes.items())
        with self._cond:
            # An idle lane given work wakes on its own condition, not ours: look again soon.
            self._wait_for(still, poll_s=0.005)

    def _wait_for(self, predicate, poll_s: float | None = None) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"lockstep: lanes did not settle in {self.timeout_s} s "
                                   f"(states {self._state}, virtual time {self.now:.3f} s)")
            self._cond.wait(left if poll_s is None else min(left, poll_s))
