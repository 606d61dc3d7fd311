"""A lane: one device's thread running plan -> run -> commit -> emit.

The scheduler (plain Python) decides, the runner (MLX) executes, and the lane
turns the committed step into events. A lane that fails, at start-up or in
the middle of a step, ends every request it holds with an error, says why,
and takes no more work; the engine routes around it. One that failed in the
middle of a step is replaced by a fresh lane of the same device and weights,
bounded (`on_failed`, engine/lane_restart.py).
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Callable

import mlx.core as mx

from ..core.director import Director
from ..core.events import Calibrated, EngineErrorEvent
from ..core.laneconfig import LaneConfig, SchedulerState
from ..core.request import Request
from ..core.scheduler import LaneScheduler
from ..core.settle import settle
from ..core.step import StepOutcome, StepPlan, StepResult
from .calibration import StartCancelled, calibrate, warm_up
from . import lanethreads, pauses
from .handoff import Handoff
from .embed import EmbedQueue
from .lanethreads import LaneThread, Started
from .prefix import PrefixCache
from .batch import Drafting
from ..core.drafts import LookupDrafter
from ..core.draft_place import DraftPlacement
from .draft_model import DraftSite, ModelDrafter
from .runner import ModelRunner


class Lane(SchedulerState):
    """One device's worker thread. `wake`, `accept` and `close` are safe from any thread."""

    def __init__(self, name: str, device: str, kind: str, model, director: Director,
                 prefix_cache: PrefixCache, lanes: dict[str, "Lane"],
                 config: LaneConfig | None = None, kv_bytes_per_token: int = 0,
                 kv_budget_bytes: int | None = None, nice: int = 0,
                 calibrate: bool = False, measure_lock: threading.Lock | None = None,
                 warm_up_s: float = 300.0, contention: tuple = (None, None),
                 on_ready: Callable[["Lane"], None] | None = None,
                 draft_model=None, vocab: int | None = None,
                 restarted_after: str | None = None):
        self.name = name
        self.device = device
        self.kind = kind
        self.director = director
        config = config or LaneConfig()
        if config.kv_budget_bytes is not None:
            kv_budget_bytes = min(kv_budget_bytes or config.kv_budget_bytes,
                                  config.kv_budget_bytes)
        self.scheduler = LaneScheduler(name, kind, director, prefix_cache, config, device,
                                       kv_bytes_per_token, kv_budget_bytes)
        config = self.scheduler.config
        self.runner = ModelRunner(model, prefix_cache, config.clear_cache_every,
                                  config.solo_decode, config.batch_prefill)
        self.draft_model, self.vocab = draft_model, vocab  # the engine may set it later
        self.draft_site = DraftSite(DraftPlacement(name), self._draft_lanes)
        if config.drafts != "off":
            self.runner.batch.drafts = Drafting(director.stop_token_ids,
                                                director.context_length, self._drafter)
        self._lanes = lanes  # every lane of the engine, for hand-overs
        self.nice = nice
        self.calibrate_at_start = calibrate
        self.measure_lock = measure_lock  # calibrations are timed one lane at a time
        self.warm_up_s = warm_up_s  # the start-up deadline (warm-up and calibration)
        self.start_contention = contention  # (beside decodes, beside prefills): coststore.py
        self.scheduler.warming_up = True  # routed around until warm (director.views)
        # starting (restarting), warming up, calibrating, serving, failed, closed
        self.phase = "restarting" if restarted_after else "starting"
        self.restarted_after = restarted_after  # why the lane it replaces failed
        # Called on this thread when a step raised: the engine restarts the
        # lane or says why not; returns the failure's message as shown.
        self.on_failed: Callable[["Lane", str], str] | None = None
        self.phase_since = time.monotonic()
        self.started_at: float | None = None  # monotonic
        self.ready = threading.Event()  # start-up ended (serving or failed)
        self.in_step_since: float | None = None  # monotonic; the watchdog reads it (engine.py)
        self.on_ready = on_ready  # called on the lane thread when start-up ends
        self.warm_up_seconds: float | None = None
        self._stopped = threading.Event()
        self._wakeup = threading.Condition()
        self.embeds = EmbedQueue(self._wakeup)  # embedding jobs, a slice between steps (embed.py)
        self._paced = threading.Event()  # set on close: a paced step ends at once
        self._closing = False
        self._calibrate_pending = False  # a remote lane came: time this lane when idle
        self.kv_bytes = 0  # as of the last step (read by the sampler thread)
        self._thread: Started | None = None  # once started (engine/runtime/lanethreads.py)

    # ---- what the engine, the router and tests read --------------------------------
    @property
    def config(self) -> LaneConfig:
        return self.scheduler.config

    @property
    def stats(self):
        return self.scheduler.stats

    @property
    def model(self):
        return self.runner.model

    @property
    def reconsider_every(self) -> int:
        return self.scheduler.reconsider_every

    @reconsider_every.setter
    def reconsider_every(self, steps: int) -> None:
        self.scheduler.reconsider_every = steps

    # ---- any thread -------------------------------------------------------------------
    def _drafter(self, request: Request):
        """What proposes for `request` (its first drafting step): the
        engine's draft model where the request or the lane's mode asks for
        it and one is loaded, else lookup over its own text."""
        mode = request.params.drafter or self.scheduler.config.drafts
        model = self.draft_model
        if mode == "model" and model is not None:
            return ModelDrafter(model, request.model_ids, self.vocab, self.draft_site)
        return LookupDrafter(request.model_ids, request.prediction_ids)

    def _draft_lanes(self) -> dict[str, str]:
        """Where this lane's draft model may run: in hybrid mode any serving
        local lane's device (draft_place.py decides), else its own."""
        if self.director.mode != "hybrid":
            return {self.name: self.device}
        return {name: lane.device for name, lane in self._lanes.items()
                if name == self.name or (lane.failed is None and lane.phase == "serving")}

    def start(self, after: LaneThread | None = None) -> None:
        """Start on a parked lane thread (`after`: the one the lane this
        replaces ran on, once it parks)."""
        self.started_at = time.monotonic()
        self._thread = lanethreads.start(self._run, self.device, self.nice, f"lane-{self.name}",
                                         after)

    @property
    def lane_thread(self) -> LaneThread | None:
        """The parked-thread handle it runs on (a restart's lane starts on it)."""
        return self._thread.thread if self._thread is not None else None

    @property
    def lanes(self) -> dict:
        """Every lane of the engine (hand-overs), shared by a restart's lane."""
        return self._lanes

    def wait_stopped(self, timeout: float) -> bool:
        """Wait until the lane's thread has ended its lane (or it never started)."""
        return self._stopped.wait(timeout)

    @property
    def thread_id(self) -> int | None:
        """The kernel id of the thread the lane runs on (once started)."""
        return self._thread.native_id if self._thread is not None else None

    def wake(self) -> None:
        with self._wakeup:
            self._wakeup.notify()

    def accept(self, request: Request, handoff: Handoff) -> bool:
        """Take over a request moved from another lane (False: this lane is shut)."""
        self.runner.accept(request.request_id, handoff)
        if not self.scheduler.adopt(request):
            self.runner.refuse(request.request_id)
            return False
        self.wake()
        return True

    def calibrate_soon(self) -> None:
        """Time this lane (its cost model) at its next idle moment, if it has
        none: a lane that started alone skipped that, and a remote lane
        added since is compared with it on predicted times."""
        if self.scheduler.cost is None and not self.calibrate_at_start:
            with self._wakeup:
                self._calibrate_pending = True
                self._wakeup.notify()

    def refuse_work(self) -> None:
        """Take no new requests or hand-overs from now on."""
        self.scheduler.close()

    def close(self, timeout: float = 30.0) -> None:
        """Stop taking work, end what the lane holds (cancelled), stop the thread."""
        self.refuse_work()
        with self._wakeup:
            self._closing = True
            self._paced.set()
            self._wakeup.notify()
        if self._thread is not None:  # its thread parked: it runs no Python as the process ends
            self._thread.wait_parked(timeout)
        else:  # never started (a restart the engine closed before it began)
            self._end_all("cancelled")
            self.runner.unload()
            self._stopped.set()

    # ---- the lane thread ----------------------------------------------------------------
    def _run(self, stream: mx.Stream) -> None:
        """The lane's life on its thread and stream (kept for the next lane)."""
        with mx.stream(stream):
            if self._start_up():
                self._loop()
            self._end_all("cancelled" if self.failed is None else "error", self.failed)
            mx.synchronize(stream)  # in-flight async work ends before the stream goes
        self.runner.unload()
        self._stopped.set()

    def _set_phase(self, phase: str) -> None:
        self.phase, self.phase_since = phase, time.monotonic()

    def _start_up(self) -> bool:
        """Warm up (every kernel serving uses runs once), then, with other lanes
        to route between, calibrate. A lane that misses its deadline has been
        turned off by the engine's watchdog meanwhile (`fail_start`)."""
        try:
            self._set_phase("warming up")
            pauses.at("loading")
            self.runner.start()
            warm = warm_up(self.runner.model, self.config.solo_decode,
                           cancelled=self._stop_starting)
            self.warm_up_seconds = warm.seconds
            self.scheduler.measured_prefill_tps = warm.prefill_tps
            if self.failed or self._closing:
                return False
            if self.calibrate_at_start:
                self._set_phase("calibrating")
                self._calibrate()
            if self.failed:
                return False
            self._set_phase("serving")
            return True
        except StartCancelled:  # the engine closed, or the watchdog gave up on it
            return False
        except Exception as exc:
            self._fail(exc, "at start-up")
            return False
        finally:
            if self.failed:
                self._set_phase("failed")
            self.scheduler.warming_up = False
            self.ready.set()
            if self.on_ready is not None:
                self.on_ready(self)

    def _calibrate(self) -> None:
        """Time this lane alone where it can: wait for the other lanes'
        calibrations only until the start-up deadline, then measure anyway."""
        lock = self.measure_lock
        left = (self.started_at or time.monotonic()) + self.warm_up_s - time.monotonic()
        held = lock.acquire(timeout=max(left, 0.0)) if lock is not None else False
        try:
            started = time.perf_counter()
            cost = calibrate(self.runner.model, solo=self.config.solo_decode,
                             cancelled=self._stop_starting, pacing=self.config)
            seconds = time.perf_counter() - started
        finally:
            if held:
                lock.release()
        cost.start_contention(*self.start_contention)
        self.scheduler.cost = cost
        self.director.emit(Calibrated(self.name, self.device, prefill_tps=cost.prefill_tps,
                                      decode_tps=cost.decode_points[0][1],
                                      batch_alpha=cost.batch_alpha,
                                      seconds=seconds + (self.warm_up_seconds or 0.0),
                                      contention=cost.contention))

    def _stop_starting(self) -> bool:
        return self._closing or self.failed is not None

    def fail_start(self, why: str) -> None:
        """Turn this lane off from another thread (it missed its start-up
        deadline): its queued requests end with `why`; the thread, stuck in
        the device, takes no work when it returns."""
        if self.failed is None and not self.ready.is_set():
            self._give_up(why)

    def stall(self, why: str) -> None:
        """The watchdog saw a step run for too long: fail the lane's requests
        (from the watchdog's thread; the lane thread stops when it returns)."""
        if self.failed is None:
            self._give_up(why)

    def _give_up(self, why: str) -> None:
        self.scheduler.fail(why)
        self._set_phase("failed")
        if self.on_ready is not None:  # waiting requests may go to another lane
            self.on_ready(self)
        self.director.emit(EngineErrorEvent("", None, message=why, lane=self.name))
        for request in self.scheduler.drain():  # device state stays with the stuck thread
            self.director.finish(request, "error", self.name, error=why)
        self.wake()

    def _loop(self) -> None:
        gate, step_s = self.config.gate, None
        while self._wait_for_work():
            if self._calibrate_pending and self.scheduler.is_idle:
                self._calibrate_now()
                continue
            if self.embeds:  # prefill-only work: one bounded slice between two steps
                self.embeds.run_slice(not self.scheduler.is_idle, step_s)
                if self.scheduler.is_idle:
                    continue
            if gate is not None:
                gate.begin(self.name)
            self.in_step_since = time.monotonic()
            started = time.perf_counter()
            try:
                plan = self.scheduler.schedule()
                result = self.runner.run(plan)
                if self.failed:  # the watchdog gave up on this step meanwhile
                    return
                result.seconds = self._pace(plan, result.seconds)
                outcome = self.scheduler.commit(plan, result)
                self._emit(plan, result, outcome)
            except Exception as exc:  # a bug or a device failure: this lane stops
                self._fail(exc, "mid-step")
                return
            self.in_step_since = None
            self.kv_bytes = self.runner.kv_bytes
            busy = step_s = time.perf_counter() - started
            if self.runner.batch.drafts is not None:  # what the drafts' planner weighs
                self.runner.batch.drafts.planner.stepped(busy)
            self.stats.busy_s += busy
            self.stats.wait_s += result.wait_s
            self.stats.host_s += busy - result.wait_s

    def _calibrate_now(self) -> None:
        self._calibrate_pending = False
        self._set_phase("calibrating")
        try:
            self._calibrate()
        except StartCancelled:
            return
        except Exception:  # it stays uncalibrated: the router routes without it
            traceback.print_exc()
        finally:
            if self.failed is None:
                self._set_phase("serving")

    def _pace(self, plan: StepPlan, seconds: float) -> float:
        """The step's seconds after the lane's pacing (LaneConfig.min_step_s / gate)."""
        config = self.config
        if config.gate is not None:
            return config.gate.end(self.name, plan, seconds)
        if config.slowdown > 1 and plan.has_work:
            self._paced.wait(seconds * (config.slowdown - 1))  # cut short by close
            seconds *= config.slowdown
        if seconds < config.min_step_s and plan.has_work:
            self._paced.wait(config.min_step_s - seconds)  # cut short by close
            return config.min_step_s
        return seconds

    def _wait_for_work(self) -> bool:
        with self._wakeup:
            while not self._closing and (self.scheduler.is_idle or self.failed) and not (
                    self._calibrate_pending and not self.failed) and not self.embeds:
                self.kv_bytes = self.runner.kv_bytes
                if self.config.gate is not None:
                    self.config.gate.idle(self.name)
                self._wakeup.wait()
            return not self._closing

    def _emit(self, plan: StepPlan, result: StepResult, outcome: StepOutcome) -> None:
        def hand_over(request: Request, target: str) -> bool:
            lane = self._lanes.get(target)
            return lane is not None and lane.accept(request, result.handoffs[request.request_id])

        settle(self.scheduler, plan, outcome, hand_over, self.runner.release)
        if not plan.has_work and not (plan.moves or plan.cancelled or plan.joins):
            with self._wakeup:  # nothing ran (a request waits on another lane): do not spin
                self._wakeup.wait(0.01)

    def _fail(self, exc: Exception, when: str) -> None:
        if self.failed is not None:  # the watchdog gave up first: its reason stands
            return
        message = f"{self.name.upper()} lane failed {when}: {type(exc).__name__}: {exc}"
        traceback.print_exc()
        self.scheduler.fail(message)
        self._set_phase("failed")
        if when == "mid-step" and self.on_failed is not None:
            message = self.on_failed(self, message)  # restarted, or why not
        restarting = self._lanes.get(self.name) not in (self, None)  # a new lane took over
        self.director.emit(EngineErrorEvent("", None, message=message, lane=self.name,
                                            restarting=restarting))

    def _end_all(self, reason: str, error: str | None = None) -> None:
        self.embeds.close(error or f"The {self.name.upper()} lane closed.")
        requests = self.scheduler.drain()
        self.runner.drop_all()
        for request in requests:
            self.director.finish(request, reason, self.name, error=error)
