"""The engine from load to close: its model loaded (`Engine.load`); its
lanes built on the memory plan's weights and started (delivery, the lanes,
the sampler thread); lanes coming and going meanwhile (a local lane's
start-up ended, a remote lane's probe answered or it went down, a remote
lane routed), each moving the requests queued where they cannot be served
and waking `Engine.wait_ready`; and the stop, in order, at `Engine.close`.

Kept apart from engine.py, the facade; it reads the engine's public names
(lanes, remotes, director, prefix cache, restorer, restarts) and emits
through its event hub."""

from __future__ import annotations

import sys
import threading
import time

from .core import priority
from .core.errors import EngineError
from .core.events import MemoryPlanned
from .core.laneconfig import LaneSpec
from .core.modes import with_a_remote
from .drafts import load_draft
from .hub import EventHub
from .lane_reports import sample_lanes
from .models.loader import load_model
from .runtime import blas, wired
from .runtime.allocator import return_freed_memory
from .runtime.coststore import CostStore
from .runtime.lane import Lane

DISK_DRAIN_S = 10.0  # how long close() waits for the disk tier's writes


def load_engine(cls, model: str, lanes: list[LaneSpec] | None, mode: str | None,
                ready_s: float | None, draft_model: str | None, kwargs: dict):
    """`Engine.load`: the model (and a draft, an embedding model named by
    folder or repo id) loaded, the engine made, a lane waited for."""
    loaded = load_model(model)
    draft = load_draft(draft_model, loaded) if draft_model else None
    if isinstance(kwargs.get("embedding_model"), str):  # a folder or a repo id
        from .models.embedding import load_embedding_model

        kwargs["embedding_model"] = load_embedding_model(kwargs["embedding_model"])
    engine = cls(loaded, lanes=lanes, mode=mode, draft=draft, **kwargs)
    if ready_s is not None:
        try:
            engine.wait_ready(ready_s)
        except EngineError:
            engine.close()
            raise
    return engine


class Lifecycle:
    def __init__(self, engine, hub: EventHub, policy_chosen: bool, mode_chosen: bool):
        """`policy_chosen`, `mode_chosen`: the engine was given them (a
        routed remote changes only what was not)."""
        self.engine, self._hub = engine, hub
        self._policy_chosen, self._mode_chosen = policy_chosen, mode_chosen
        self._ready = threading.Condition()
        self.wired = False
        self.sampler: threading.Thread | None = None
        self._sampler_stop = threading.Event()

    def hold_wired(self, enabled: list[LaneSpec]) -> str | None:
        """Metal: MLX may keep the weights and KV resident while a GPU lane is
        open, as mlx-lm's generate does (runtime/wired.py); the note says
        when the model comes near what the GPU should keep resident."""
        self.wired = any(s.device == "gpu" for s in enabled)
        return wired.acquire(self.engine.memory_plan.shared_weight_bytes) if self.wired else None

    def build_lanes(self, enabled: list[LaneSpec], models: dict, warm_up_s: float,
                    stored: dict[str, float], calibrate: bool) -> dict[str, Lane]:
        """A lane per enabled spec on the model object the plan gave it,
        watched for restarts (`engine.restarts`) and routed by the director."""
        engine = self.engine
        lanes: dict[str, Lane] = {}
        measure = threading.Lock()  # calibrations are timed one lane at a time
        for spec in enabled:
            lane_plan = engine.memory_plan.lane(spec.name)
            lane = Lane(spec.name, spec.device, spec.kind, models[spec.name], engine.director,
                        engine.prefix_cache, lanes, spec.config,
                        engine.memory_plan.kv_bytes_per_token, lane_plan.kv_budget_bytes,
                        nice=engine.worker_nice, calibrate=calibrate, measure_lock=measure,
                        warm_up_s=warm_up_s, contention=CostStore.of(stored, spec.name),
                        on_ready=self.lane_ready, vocab=engine.vocab_size,
                        draft_model=engine.draft_model.model if engine.draft_model else None)
            lanes[spec.name] = engine.restarts.watch(lane)
            engine.director.add_lane(lane.scheduler)
        return lanes

    def start(self, sample_interval_s: float) -> None:
        """Delivery, the lanes and the sampler start. Every lane warms up at
        once on its own thread (calibration is timed one lane at a time);
        nothing here waits for them: a lane serves as soon as it is ready and
        requests queue until one is."""
        engine = self.engine
        for tid in blas.blas_thread_ids:
            priority.lower_thread(engine.worker_nice, tid)
        self._hub.start()
        self._hub.emit(MemoryPlanned("", None, plan=engine.memory_plan))
        for lane in engine.lanes.values():
            lane.start()
        self.sampler = threading.Thread(
            target=sample_lanes, name="lane-sampler", daemon=True,
            args=(engine.lanes, self._hub.emit, self._sampler_stop, sample_interval_s,
                  engine.worker_nice, engine.watchdog_s, engine.context_length,
                  lambda: engine.prefix_cache.nbytes, engine.remotes.samples))
        self.sampler.start()

    def wait_ready(self, timeout: float | None, every_lane: bool) -> bool:
        engine = self.engine
        deadline = None if timeout is None else time.monotonic() + timeout

        def done() -> bool:
            lanes = engine.lanes.values()
            if all(lane.failed for lane in lanes):
                return True
            if every_lane:  # remote lanes too: their probe answered, or they are down
                return (all(lane.ready.is_set() or lane.failed for lane in lanes)
                        and all(r.ready.is_set() for r in engine.remotes.lanes.values()))
            return any(lane.ready.is_set() and not lane.failed for lane in lanes)

        with self._ready:
            while not done():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._ready.wait(left if left is None else min(left, 1.0))
        if not any(lane.failed is None for lane in engine.lanes.values()):
            why = "; ".join(lane.failed or "" for lane in engine.lanes.values())
            raise EngineError(f"No lane could start: {why}", "lane-failed")
        return True

    def lane_ready(self, lane: Lane) -> None:
        """A lane's start-up ended (or it was turned off): requests queued on
        lanes still warming up (or on it, if it failed) go to a ready lane."""
        self._reroute([lane.name] if lane.failed else
                      [name for name, other in self.engine.lanes.items() if other.warming_up])
        # Loading and warming up freed temporaries (a weight conversion's, a
        # closed engine's buffers freed meanwhile): give them back (Linux).
        return_freed_memory()

    def remote_changed(self, lane) -> None:
        """A remote lane's probe ended or it went down (remotes.py): its queue
        goes to a ready lane, and lanes still warming up may hand theirs to it."""
        self._reroute([lane.name] + [name for name, local in self.engine.lanes.items()
                                     if local.warming_up])

    def _reroute(self, sources: list[str]) -> None:
        for source in sources:
            for target, event in self.engine.director.reroute_waiting(source):
                self._hub.emit(event)
                self.engine.lane(target).wake()
        with self._ready:
            self._ready.notify_all()

    def remote_routed(self) -> None:
        """A routed remote makes the engine hybrid (unless a mode was asked
        for), cost-aware (unless a policy was), and its local lanes calibrate
        (the router compares their predicted times with the remote's)."""
        director = self.engine.director
        with director.lock:
            director.policy, mode = with_a_remote(director.policy, director.mode,
                                                  self._policy_chosen, self._mode_chosen)
            if mode != director.mode:
                director.set_mode(mode)
        for lane in self.engine.lanes.values():
            lane.calibrate_soon()

    def close(self) -> None:
        """Every request ended (one `Finished` each), the lanes, remotes,
        restorer and disk tier stopped, what is queued delivered, the prefix
        cache cleared; the engine then drops its model."""
        engine = self.engine
        if engine.cost_store is not None:
            engine.cost_store.save({name: lane.cost for name, lane in engine.lanes.items()})
        if self.sampler is not None:
            self._sampler_stop.set()
            self.sampler.join()
        if hasattr(engine, "restarts"):
            engine.restarts.close()  # no lane restarts from now on
        with engine.director.lock:  # no lane takes a hand-over from now on
            for lane in engine.lanes.values():
                lane.refuse_work()
        engine.remotes.close()  # their requests in flight end cancelled
        engine.constraints.close()
        for lane in engine.lanes.values():
            lane.close()
        if engine.restorer is not None:
            engine.restorer.close()
        if self.wired:  # the lanes have stopped: no evaluation in flight
            self.wired = False
            wired.release()
        if engine.prefix_cache.disk is not None:  # what the lanes queued is written
            if not engine.prefix_cache.disk.close(DISK_DRAIN_S):
                print("tandem: KV still being saved was left unsaved at close", file=sys.stderr)
        self._hub.stop()  # what is queued is delivered first
        # Free cached KV now, while MLX is fully alive, not at interpreter exit.
        engine.prefix_cache.clear()
