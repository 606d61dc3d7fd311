"""Lane restarts: a lane whose step raised is replaced by a fresh one.

A step's failure that a request owns ends that request alone (runtime/
runner.py); any other (a device fault, a bug in the decode batch) leaves the
lane's device state unknown, so the lane ends what was in flight with
"error" and the engine replaces it: a new `Lane` of the same name, device,
config and weights (the model object the old one ran; its KV and batch are
dropped, the shared prefix cache stays), with the old cost model (no
calibration). It is installed at once, on the failing lane's thread and
under the director's lock, so requests that had not started, and those
submitted meanwhile, queue on it ("restarting", routed around while another
lane serves); it starts, off that thread, once the old lane's thread has
ended, on that same parked thread and stream (lanethreads.py), and
warms up again. A lane restarted `RESTARTS` times within `WINDOW_S` stays
failed (core/restarts.py decides). A lane that failed at start-up, or was
stopped by the watchdog (its thread may never return), is not restarted.
"""

from __future__ import annotations

import threading
import time

from ..core.restarts import RestartBudget
from .lane import Lane

STOP_WAIT_S = 60.0  # how long a restart waits for the old lane's thread to end


class LaneRestarts:
    """The engine's restarts of its local lanes (`watch` each lane)."""

    def __init__(self, engine, budget: RestartBudget | None = None):
        self.engine = engine
        self.budget = budget or RestartBudget()
        self._lock = threading.Lock()
        self._closed = False
        self._threads: list[threading.Thread] = []

    def watch(self, lane: Lane) -> Lane:
        lane.on_failed = self.lane_failed
        return lane

    def lane_failed(self, old: Lane, why: str) -> str:
        """On the failing lane's thread (its scheduler already failed): put
        a fresh lane in its place, or say why not. Returns the message shown
        (the lane's reason, its requests' error, the EngineErrorEvent)."""
        engine, director = self.engine, self.engine.director
        now = time.monotonic()
        with self._lock, director.lock:
            if self._closed or engine.lanes.get(old.name) is not old:
                return why
            if not self.budget.take(old.name, now):
                why = self.budget.given_up(why, old.name, now)
                old.scheduler.fail(why)
                return why
            why = self.budget.restarted(why, old.name, now)
            old.scheduler.fail(why)
            new = self.watch(self._fresh(old, why))
            engine.lanes[old.name] = new
            director.add_lane(new.scheduler)
            # Requests that had not started hold no device state: they wait
            # for the new lane (or go where the router sends them once one serves).
            new.scheduler.waiting.extend(old.scheduler.waiting)
            old.scheduler.waiting.clear()
            thread = threading.Thread(target=self._start, args=(old, new), daemon=True,
                                      name=f"lane-restart-{old.name}")
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()
        return why

    @staticmethod
    def _fresh(old: Lane, why: str) -> Lane:
        """A lane like `old` (not started), on the weights `old` ran."""
        sched = old.scheduler
        new = Lane(old.name, old.device, old.kind, old.runner.model, old.director,
                   old.runner.prefix_cache, old.lanes, old.config, sched.kv_bytes_per_token,
                   sched.kv_budget_bytes, nice=old.nice, calibrate=False,
                   measure_lock=old.measure_lock, warm_up_s=old.warm_up_s,
                   contention=old.start_contention, on_ready=old.on_ready,
                   draft_model=old.draft_model, vocab=old.vocab, restarted_after=why)
        new.scheduler.cost = sched.cost  # learned so far: kept, not measured again
        new.scheduler.warming_up = True
        new.reconsider_every = old.reconsider_every
        return new

    def _start(self, old: Lane, new: Lane) -> None:
        """Off the failing lane's thread: once it has ended, the new lane
        starts on that thread (its stream)."""
        old.wait_stopped(STOP_WAIT_S)
        with self._lock:
            if self._closed or self.engine.lanes.get(new.name) is not new:
                return  # the engine closes it (never started: its queue cancelled)
            new.start(after=old.lane_thread)

    def close(self) -> None:
        """The engine closes: no restart starts from now on; those under way
        have started their lane (the engine closes it) or never will."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        for thread in threads:
            thread.join(STOP_WAIT_S)
