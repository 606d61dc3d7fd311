"""The engine: loads a model, owns the lanes, routes requests, emits events.

All MLX work runs on lane threads. `submit`, `cancel`, `set_mode`, `subscribe`
and `close` are safe from any thread.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

import mlx.core as mx

from . import blas, priority
from .errors import EngineError
from .events import Finished, LaneSample, Migrated, Queued, Routed
from .handoff import Handoff
from .lane import Lane, LaneConfig
from .handle import RequestHandle
from .loader import LoadedModel, load_model, models_by_format
from .params import SamplingParams
from .prefix import PrefixCache
from .request import Request
from .policies import CostAwarePolicy
from .router import MODES, LaneView, LeastLoadedPolicy, Policy, RequestView, eligible_lanes

Observer = Callable[[object], None]


@dataclass(slots=True, frozen=True)
class LaneSpec:
    """A lane to build: its name, device ('cpu'/'gpu') and weight format.

    weight_format 'auto' picks what runs fastest there: dense float32 on the
    CPU (BLAS; see benchmarks/RESULTS.md), the file's quantization on a GPU.
    """

    name: str
    device: str = "cpu"
    weight_format: str = "auto"
    config: LaneConfig | None = None
    acts_as: str | None = None  # the role the router sees; tests run a CPU lane as "gpu"

    @property
    def kind(self) -> str:
        return self.acts_as or self.device

    def resolved_format(self) -> str:
        if self.weight_format != "auto":
            return self.weight_format
        return "float32" if self.device == "cpu" else "quantized"


def gpu_available() -> bool:
    """Whether MLX has a usable GPU here (Metal on macOS, CUDA on Linux)."""
    try:
        return bool(mx.is_available(mx.gpu))
    except Exception:
        return False


def default_lanes() -> list[LaneSpec]:
    if gpu_available():
        return [LaneSpec("gpu", "gpu"), LaneSpec("cpu", "cpu")]
    return [LaneSpec("cpu", "cpu")]


class Engine:
    """Continuous-batching inference over one model on one or more lanes."""

    def __init__(self, loaded: LoadedModel, lanes: list[LaneSpec] | None = None,
                 mode: str | None = None, policy: Policy | None = None,
                 prefix_cache_bytes: int = 1 << 30, prefix_block_size: int = 16,
                 sample_interval_s: float = 0.1, worker_nice: int = 0):
        """`worker_nice` > 0 runs the engine's threads (lanes, their MLX
        streams, OpenBLAS's workers) at that niceness on Linux, so that an app's
        GUI thread gets the cores first; see engine/priority.py."""
        self.model_info = loaded
        self.worker_nice = worker_nice
        self.tokenizer = loaded.tokenizer
        self.context_length = loaded.context_length
        self.prefix_cache = PrefixCache(prefix_block_size, prefix_cache_bytes)
        specs = lanes or default_lanes()
        self.policy: Policy = policy or (CostAwarePolicy() if len(specs) > 1
                                         else LeastLoadedPolicy())
        self._expected_output = 200.0  # EMA of answer lengths, for the router
        self.router_s = 0.0  # time spent in routing decisions (for benchmarks)
        self.router_calls = 0
        if len({s.name for s in specs}) != len(specs):
            raise EngineError("Lane names must be unique.", "bad-argument")
        self._observers: list[Observer] = []
        self._handles: dict[str, RequestHandle] = {}
        self._requests: dict[str, tuple[Request, Lane]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.lanes: dict[str, Lane] = {}
        models = models_by_format(loaded, [spec.resolved_format() for spec in specs])
        for spec in specs:
            self.lanes[spec.name] = Lane(
                spec.name, spec.device, models[spec.resolved_format()], loaded.tokenizer,
                self.prefix_cache, self._emit, loaded.stop_token_ids, loaded.context_length,
                spec.config)
            self.lanes[spec.name].director = self
            self.lanes[spec.name].kind = spec.kind
            self.lanes[spec.name].nice = worker_nice
            self.lanes[spec.name].calibrate_at_start = len(specs) > 1
        if len(specs) > 1:
            probe = threading.Barrier(len(specs))
            for lane in self.lanes.values():
                lane.contention_probe = probe
        for tid in blas.blas_thread_ids:
            priority.lower_thread(worker_nice, tid)
        self.mode = mode or ("hybrid" if any(s.kind == "gpu" for s in specs) else "cpu-only")
        self.set_mode(self.mode)
        for lane in self.lanes.values():
            # One at a time, so calibrations do not slow each other down;
            # the router needs every lane's cost model before the first request.
            lane.start()
            lane.calibrated.wait(60)
        for lane in self.lanes.values():
            lane.probed.wait(60)  # then all at once: contention (calibration.py)
        self._sampler_stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample_lanes, args=(sample_interval_s,),
                                         name="lane-sampler", daemon=True)
        self._sampler.start()

    @classmethod
    def load(cls, model: str = "default", lanes: list[LaneSpec] | None = None,
             mode: str | None = None, **kwargs) -> "Engine":
        """Load `model` ('default', a GGUF file, a model folder or a repo id)."""
        return cls(load_model(model), lanes=lanes, mode=mode, **kwargs)

    # ---- API ---------------------------------------------------------------
    def render(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of `messages` in the model's chat template, ready to answer."""
        try:
            return list(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True))
        except Exception as e:
            raise EngineError(f"Cannot apply the chat template: {e}", "bad-argument") from e

    def submit(self, messages: list[dict[str, str]] | None = None,
               params: SamplingParams | None = None, tab_id: str | None = None,
               prompt_ids: list[int] | None = None) -> RequestHandle:
        """Queue a generation for `messages` (or raw `prompt_ids`)."""
        if self._closed:
            raise EngineError("The engine is closed.", "closed")
        params = params or SamplingParams()
        ids = list(prompt_ids) if prompt_ids is not None else self.render(messages or [])
        if not ids:
            raise EngineError("The prompt is empty.", "bad-argument")
        if len(ids) >= self.context_length:
            raise EngineError(
                f"The conversation is {len(ids)} tokens long, more than the model's context "
                f"of {self.context_length} tokens. Start a new chat or shorten it.",
                "prompt-too-long")
        request = Request(prompt_ids=ids, params=params, tab_id=tab_id)
        handle = RequestHandle(self, request)
        cached = self.prefix_cache.cached_length(ids, limit=len(ids) - 1)
        with self._lock:
            view = RequestView(request.request_id, len(ids), cached,
                               self._expected_left(request), 0, tab_id)
            started = time.perf_counter()
            placement = self.policy.place(view, self._views())
            self._count_router(started)
            lane = self.lanes[placement.lane]
            self._handles[request.request_id] = handle
            self._requests[request.request_id] = (request, lane)
        self._emit(Queued(request.request_id, tab_id, prompt_tokens=len(ids)))
        self._emit(Routed(request.request_id, tab_id, phase="prefill", lane=lane.name,
                          reason=placement.reason, predicted_s=placement.predicted_s,
                          cached_tokens=cached))
        lane.submit(request)
        return handle

    def cancel(self, request_id: str) -> None:
        """Stop a request at the next step boundary; its slot and KV are freed."""
        with self._lock:
            entry = self._requests.get(request_id)
        if entry is not None:
            request, _ = entry
            request.cancel_event.set()
            for lane in self.lanes.values():  # it may be moving between lanes
                lane.wake()

    def cancel_tab(self, tab_id: str) -> None:
        with self._lock:
            ids = [rid for rid, (req, _) in self._requests.items() if req.tab_id == tab_id]
        for rid in ids:
            self.cancel(rid)

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise EngineError(f"Unknown mode '{mode}' (expected one of {', '.join(MODES)}).",
                              "bad-argument")
        self.mode = mode

    def memory(self) -> dict[str, int]:
        """Bytes: MLX active and peak memory, running requests' KV, prefix cache.
        (Plain getters: safe from any thread.)"""
        return {"active": int(mx.get_active_memory()), "peak": int(mx.get_peak_memory()),
                "kv": sum(lane.kv_bytes for lane in self.lanes.values()),
                "prefix_cache": self.prefix_cache.nbytes}

    def subscribe(self, observer: Observer) -> Callable[[], None]:
        """Call `observer(event)` for every event, on engine threads; returns an
        unsubscribe function."""
        with self._lock:
            self._observers.append(observer)

        def unsubscribe() -> None:
            with self._lock:
                if observer in self._observers:
                    self._observers.remove(observer)
        return unsubscribe

    def generate(self, messages: list[dict[str, str]] | None = None,
                 params: SamplingParams | None = None, prompt_ids: list[int] | None = None,
                 timeout: float | None = None) -> Finished:
        """Submit and wait: a convenience for scripts and tests."""
        return self.submit(messages, params, prompt_ids=prompt_ids).result(timeout)

    def close(self) -> None:
        """Cancel everything and stop the lanes."""
        if self._closed:
            return
        self._closed = True
        self._sampler_stop.set()
        self._sampler.join()
        for lane in self.lanes.values():
            lane.close()
        # Free cached KV now, while MLX is fully alive, not at interpreter exit.
        self.prefix_cache.clear()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- the director: lanes ask between steps ----------------------------------
    def decode_lane_for(self, request: Request, lane: Lane) -> str:
        with self._lock:
            started = time.perf_counter()
            placement = self.policy.place_decode(self._request_view(request), lane.name,
                                                 self._views())
            self._count_router(started)
        if placement.lane == lane.name:
            self._emit(Routed(request.request_id, request.tab_id, phase="decode",
                              lane=lane.name, reason=placement.reason,
                              predicted_s=placement.predicted_s,
                              cached_tokens=request.cached_tokens))
        else:
            self._emit(Migrated(request.request_id, request.tab_id, from_lane=lane.name,
                                to_lane=placement.lane, reason=placement.reason,
                                predicted_s=placement.predicted_s))
        return placement.lane

    def move_for(self, request: Request, lane: Lane) -> str | None:
        with self._lock:
            started = time.perf_counter()
            placement = self.policy.reconsider(self._request_view(request), lane.name,
                                               self._views())
            self._count_router(started)
        if placement is None or placement.lane == lane.name:
            return None
        self._emit(Migrated(request.request_id, request.tab_id, from_lane=lane.name,
                            to_lane=placement.lane, reason=placement.reason,
                            predicted_s=placement.predicted_s))
        return placement.lane

    def describe_lanes(self) -> dict[str, str]:
        """One line per lane on what its cost model believes now, for people."""
        lines = {}
        for name, lane in self.lanes.items():
            cost, device = lane.cost, lane.device.upper()
            if cost is None:
                lines[name] = f"{device} lane; not calibrated (one lane: nothing to route)"
                continue
            prefill = cost.prefill_tps / cost.prefill_correction
            lines[name] = (
                f"{device} lane: prefill {prefill:.0f} tok/s, one-stream decode "
                f"{1 / cost.decode_step_s(1, 0):.1f} tok/s, batch "
                f"factor {cost.batch_alpha:.2f}, steps {1 + cost.contention:.2f}x as long while "
                f"other lanes run (contention {cost.contention:.2f})")
        return lines

    def hand_off(self, handoff: Handoff, to_lane: str) -> None:
        target = self.lanes[to_lane]
        with self._lock:
            if handoff.request.request_id in self._requests:
                self._requests[handoff.request.request_id] = (handoff.request, target)
        target.adopt(handoff)

    def others_busy(self, lane: Lane) -> bool:
        return any(not other.is_idle for other in self.lanes.values() if other is not lane)

    # ---- internals ---------------------------------------------------------
    def _count_router(self, started: float) -> None:
        self.router_s += time.perf_counter() - started
        self.router_calls += 1

    def _expected_left(self, request: Request) -> int:
        left = min(request.params.max_tokens, int(self._expected_output)) - request.num_output
        return max(left, 16)

    def _request_view(self, request: Request) -> RequestView:
        return RequestView(request.request_id, request.num_prompt, request.cached_tokens,
                           self._expected_left(request), request.num_output, request.tab_id,
                           request.num_output - request.output_at_last_move)

    def _lane_view(self, lane: Lane) -> LaneView:
        decoding = lane.decoding_requests()
        mean_ctx = (sum(r.num_prompt + r.num_output for r in decoding) / len(decoding)
                    if decoding else 0.0)
        return LaneView(lane.name, lane.kind, lane.queue_depth, lane.batch_size,
                        lane.pending_prompt_tokens, len(decoding), mean_ctx,
                        float(sum(self._expected_left(r) for r in decoding)),
                        lane.config.prefill_chunk_busy, lane.cost)

    def _views(self) -> list[LaneView]:
        return eligible_lanes(self.mode, [self._lane_view(lane) for lane in self.lanes.values()])

    def _emit(self, event) -> None:
        request_id = getattr(event, "request_id", None)
        with self._lock:
            observers = list(self._observers)
            handle = self._handles.get(request_id) if request_id else None
            if isinstance(event, Finished):
                if event.reason in ("stop", "length") and event.output_tokens:
                    self._expected_output += 0.2 * (event.output_tokens - self._expected_output)
                self._handles.pop(request_id, None)
                self._requests.pop(request_id, None)
        if handle is not None:
            handle._deliver(event)
        for observer in observers:
            try:
                observer(event)
            except Exception:  # an observer's bug must not stop a lane
                import traceback
                traceback.print_exc()

    def _sample_lanes(self, interval: float) -> None:
        priority.lower_thread(self.worker_nice)
        last = {name: (lane.stats.busy_s, lane.stats.output_tokens, time.perf_counter())
                for name, lane in self.lanes.items()}
        while not self._sampler_stop.wait(interval):
            for name, lane in self.lanes.items():
                busy, out, t = lane.stats.busy_s, lane.stats.output_tokens, time.perf_counter()
                busy0, out0, t0 = last[name]
                last[name] = (busy, out, t)
                dt = max(t - t0, 1e-6)
                self._emit(LaneSample(
                    lane=name, device=lane.device, busy_fraction=min(1.0, (busy - busy0) / dt),
                    tokens_per_s=(out - out0) / dt, batch_size=lane.batch_size,
                    queue_depth=lane.queue_depth, kv_bytes=lane.kv_bytes,
                    prefix_cache_bytes=self.prefix_cache.nbytes))
