"""The engine: loads a model, plans memory, owns the lanes, emits events.

It coordinates; it does not schedule: each lane's `LaneScheduler` plans its
steps and the shared `Director` routes between lanes. All MLX work runs on
lane threads. It satisfies `EngineAPI` (interface.py), as a remote model's
engine does. `prepare`, `submit`, `cancel`, `set_mode`, `subscribe` and
`close` are safe from any thread. The facade the app and the server see; its
parts: prompt.py (`ModelPrompts`, its base), runtime/placement.py,
lifecycle.py, submission.py, core/modes.py, remotes.py, drafts.py, embeddings.py.
"""

from __future__ import annotations

from typing import Callable

import mlx.core as mx

from .core.director import Director
from .core.errors import EngineError
from .core.events import Finished
from .core.laneconfig import LaneInfo, LaneSpec
from .core.modes import allowed_modes, default_mode, default_policy, mode_refusal
from .core.params import SamplingParams
from .core.router import Policy
from .drafts import attach, aux_models, check_lanes
from .embeddings import Embedder, embedding_aux
from .handle import RequestHandle
from .hub import EventHub, Observer
from .interface import Capabilities, Prepared
from .lane_reports import describe_lanes, lane_info
from .lifecycle import Lifecycle, load_engine
from .models.chat_template import has_chat_template
from .models.loader import LoadedModel
from .prompt import ModelPrompts
from .remotes import Remotes
from .runtime.allocator import return_freed_memory
from .runtime.coststore import CostStore
from .runtime.lane_restart import LaneRestarts
from .runtime.placement import default_lanes, gpu_available, place  # (first two: public)
from .submission import Submission
from .watchdog import WARM_UP_S, WATCHDOG_S

__all__ = ["Engine", "default_lanes", "gpu_available"]
FIRST_LANE_WAIT_S = 600.0  # how long an app waits for the first lane to serve


class Engine(ModelPrompts):
    """Continuous-batching inference over one model on one or more lanes;
    its model's prompt side (tokenizer, formats, `prepare`...) is its base's."""

    def __init__(self, loaded: LoadedModel, lanes: list[LaneSpec] | None = None,
                 mode: str | None = None, policy: Policy | None = None,
                 prefix_cache_bytes: int | None = None, prefix_block_size: int = 16,
                 sample_interval_s: float = 0.1, worker_nice: int = 0,
                 memory_budget_bytes: int | None = None, warm_up_s: float = WARM_UP_S,
                 watchdog_s: float = WATCHDOG_S, cost_store: str | None = None,
                 remotes: list | None = None, draft: LoadedModel | None = None,
                 kv_cache_dir: str | None = None, kv_cache_bytes: int | None = None,
                 embedding_model=None):
        """Returns at once: the lanes warm up on their own threads (a GPU compiles its
        kernels there) and requests submitted meanwhile queue until a lane is ready;
        `wait_ready` waits for that. `worker_nice` > 0 runs the engine's threads (lanes,
        their MLX streams, OpenBLAS's workers) at that niceness on Linux, so that an
        app's GUI thread gets the cores first; see engine/core/priority.py.
        `memory_budget_bytes` overrides the machine's budget for the plan. `warm_up_s`:
        a lane not serving this long after it started is turned off, with the reason
        shown. `watchdog_s`: the least time a step may run before the watchdog dumps
        every thread's stack and fails the lane's requests (it allows ten times the
        longest step the lane's cost model expects, or twenty times its warm-up, if
        more). `cost_store`: a JSON file where lanes' learned contention is kept between
        runs (engine/runtime/coststore.py). `remotes`: remote lanes to add, each a
        `RemoteSpec` or (spec, API key) (`add_remote`). `draft`: a draft model
        (drafts.py; every lane drafts with it unless `lanes` say otherwise).
        `kv_cache_dir`: the disk tier's folder (KV of finished answers kept there and
        read back after a restart: engine/restore.py; None: no disk tier),
        `kv_cache_bytes` its budget."""
        specs = check_lanes(lanes or default_lanes(), draft, loaded)
        self.draft_model = draft
        self.embedder = Embedder(self, embedding_model)  # embeddings.py (None: no model)
        if len({s.name for s in specs}) != len(specs):
            raise EngineError("Lane names must be unique.", "bad-argument")
        ModelPrompts.__init__(self, loaded, worker_nice)  # the model's prompt side (prompt.py)
        self.watchdog_s = watchdog_s
        self._hub = EventHub(worker_nice)  # handles and observers hear here (hub.py)
        self._closed = False
        self._submission = Submission(self, self._hub)
        self._life = Lifecycle(self, self._hub, policy is not None, mode is not None)
        self.memory_plan, self.prefix_cache, self.cache_profile, models = place(
            loaded, specs, memory_budget_bytes, aux_models(draft, loaded)
            + embedding_aux(self.embedder.model), prefix_cache_bytes, prefix_block_size)
        self.disabled_lanes = {lp.name: lp.reason for lp in self.memory_plan.lanes
                               if not lp.enabled}
        self.restorer = self._submission.restorer(loaded, kv_cache_dir, kv_cache_bytes)
        enabled = [s for s in specs if self.memory_plan.lane(s.name).enabled]
        self.wired_note = self._life.hold_wired(enabled)
        self.director = Director(policy or default_policy(len(enabled), bool(remotes)),
                                 self._emit, loaded.context_length, loaded.stop_token_ids,
                                 default_mode([s.kind for s in enabled]) if mode is None else mode)
        self.cost_store = CostStore(cost_store, loaded.name, enabled) if cost_store else None
        self.restarts = LaneRestarts(self)  # a lane whose step raised is replaced
        self.lanes = self._life.build_lanes(
            enabled, models, warm_up_s, self.cost_store.load() if self.cost_store else {},
            calibrate=len(enabled) > 1 or bool(remotes))
        del models
        self.remotes = Remotes(self, emit=self._emit, on_change=self._life.remote_changed,
                               on_routed=self._life.remote_routed)
        self._life.start(sample_interval_s)
        for remote in remotes or ():
            spec, key = remote if isinstance(remote, tuple) else (remote, None)
            self.add_remote(spec, key)

    def wait_ready(self, timeout: float | None = None, every_lane: bool = False) -> bool:
        """Wait until a lane serves (`every_lane`: until every lane's start-up
        has ended, remote lanes' probes included). True if so within `timeout`;
        raises EngineError when every lane failed to start, with each one's reason."""
        return self._life.wait_ready(timeout, every_lane)

    @classmethod
    def load(cls, model: str = "default", lanes: list[LaneSpec] | None = None,
             mode: str | None = None, ready_s: float | None = FIRST_LANE_WAIT_S,
             draft_model: str | None = None, **kwargs) -> "Engine":
        """Load `model` ('default', a GGUF file, a model folder or a repo id)
        and wait until a lane serves (at most `ready_s`; None: do not wait).
        `draft_model`: a model to draft with (drafts.py), named the same ways.
        Raises EngineError when the model cannot load or no lane can start."""
        return load_engine(cls, model, lanes, mode, ready_s, draft_model, kwargs)

    # ---- requests (submission.py) --------------------------------------------
    def submit(self, prepared: Prepared | list[dict] | None = None,
               params: SamplingParams | None = None, *, tab_id: str | None = None,
               prompt_ids: list[int] | None = None, thinking: bool = True,
               tools: list[dict] | None = None, tool_choice=None) -> RequestHandle:
        """Queue a generation of what `prepare` made; safe from any thread (submission.py).
        Shorthands: `submit(messages, params, tools=, tool_choice=)` and
        `submit(prompt_ids=ids)` go through `prepare` / `prepare_prompt` here. A
        reasoning model's thinking comes apart from its answer (`Token.reasoning`,
        `Finished.reasoning`) unless `thinking` is False (raw completions); its
        tool calls as `Token.tool_calls` / `Finished.tool_calls` (`parse_tool_call`)."""
        if self._closed:
            raise EngineError("The engine is closed.", "closed")
        params = params or SamplingParams()
        prepared = self._for_submit(prepared, params, prompt_ids, tools, tool_choice)
        return self._submission.submit(prepared, params, tab_id, thinking)

    def generate(self, prepared: Prepared | list[dict] | None = None,
                 params: SamplingParams | None = None, *,
                 prompt_ids: list[int] | None = None, timeout: float | None = None) -> Finished:
        """Submit and wait: a convenience for scripts and tests."""
        return self.submit(prepared, params, prompt_ids=prompt_ids).result(timeout)

    def cancel(self, request_id: str) -> None:
        """Stop a request at the next step boundary; its slot and KV are freed."""
        self._submission.cancel(request_id)

    def cancel_tab(self, tab_id: str) -> None:
        self._submission.cancel_tab(tab_id)

    def lane_of(self, request_id: str) -> str | None:
        """The lane holding a request now (None once it finished)."""
        handle = self._hub.handle(request_id)
        return handle.request.lane if handle is not None else None

    def subscribe(self, observer: Observer) -> Callable[[], None]:
        """Call `observer(event)` for every event, on engine threads; returns an
        unsubscribe function. The memory plan and the lanes' calibrations, which
        happen at load, are replayed to it first."""
        return self._hub.subscribe(observer)

    def _emit(self, event) -> None:
        self._hub.emit(event)  # engine/hub.py, on the delivery thread

    # ---- lanes and modes ---------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        """What this engine can do now (engine/interface.py); chats if the
        model has a template (a vision model's may be its processor's)."""
        model = self.model_info.model
        modes = allowed_modes([lane.kind for lane in self.lanes.values()],
                              len(self.remotes.lanes))
        return Capabilities(modes=modes, remote_lanes=True, renders_locally=True,
                            logprobs=True, grammars=True, tools=self.tool_format is not None,
                            images=getattr(model, "reads_images", False),
                            drafts=any(lane.runner.batch.drafts is not None
                                       for lane in self.lanes.values()),
                            chat=has_chat_template(self.tokenizer) or has_chat_template(
                                getattr(model, "processor", None)))

    @property
    def mode(self) -> str:
        return self.director.mode

    def set_mode(self, mode: str) -> None:
        """'gpu-only', 'hybrid' or 'cpu-only': one of `capabilities.modes` (core/modes.py)."""
        refusal = mode_refusal(mode, [lane.kind for lane in self.lanes.values()],
                               len(self.remotes.lanes))
        if refusal is not None:
            raise EngineError(refusal, "bad-argument")
        self.director.set_mode(mode)
        for lane in self.all_lanes():
            lane.wake()

    @property
    def policy(self) -> Policy:
        """The routing policy; assigning one takes effect at the next decision."""
        return self.director.policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        with self.director.lock:
            self.director.policy = policy

    @property
    def router_s(self) -> float:
        return self.director.router_s

    @property
    def router_calls(self) -> int:
        return self.director.router_calls

    def lane(self, name: str):
        """A lane by name: local (engine/runtime/lane.py) or remote (engine/remote/lane.py)."""
        return self.lanes.get(name) or self.remotes.lanes[name]

    def all_lanes(self) -> list:
        return list(self.lanes.values()) + list(self.remotes.lanes.values())

    def lane_info(self) -> list[LaneInfo]:
        """The running lanes, in order (lane_reports.py), then the remote ones."""
        return lane_info(self.lanes.values()) + self.remotes.info()

    def describe_lanes(self) -> dict[str, str]:
        """One line per lane on what its cost model believes now, for people."""
        return {**describe_lanes(self.lanes.values()), **self.remotes.describe()}

    def memory(self) -> dict[str, int]:
        """Bytes: MLX active and peak memory, running requests' KV, prefix cache.
        (Plain getters: safe from any thread.)"""
        return {"active": int(mx.get_active_memory()), "peak": int(mx.get_peak_memory()),
                "kv": sum(lane.kv_bytes for lane in self.lanes.values()),
                "prefix_cache": self.prefix_cache.nbytes}

    # ---- features: remote lanes, drafts, embeddings, KV on disk -------------
    def add_remote(self, spec, api_key: str | None = None):
        """Add a remote lane (`RemoteSpec`): routed once its probe answered, if
        it serves the loaded model; else listed with the reason (remotes.py)."""
        if self._closed:
            raise EngineError("The engine is closed.", "closed")
        return self.remotes.add(spec, api_key)

    def remove_remote(self, name: str) -> None:
        self.remotes.remove(name)

    def set_draft_model(self, draft: LoadedModel | None) -> None:
        """Draft with `draft` from now on (None: none); EngineError if it
        cannot draft for this model (engine/drafts.py)."""
        attach(self, draft)

    def embed(self, inputs: list, tab_id: str | None = None):
        """Embed texts (or token-id lists); a handle whose `result(timeout)`
        gives the vectors (engine/embeddings.py)."""
        return self.embedder.submit(inputs, tab_id)

    def set_embedding_model(self, model) -> None:
        """Embed with `model` (models/embedding.py) from now on; None: none."""
        self.embedder.set_model(model)

    def clear_saved_kv(self) -> int:
        """Remove this model's KV kept on disk (the disk tier); the bytes freed."""
        disk = self.prefix_cache.disk
        return disk.clear() if disk is not None else 0

    def forget_saved_kv(self, owner: str) -> None:
        """`owner` (a deleted chat's `tab_id`) is gone: saved KV no other chat
        uses is removed, after the saves queued before (runtime/kv_owners.py)."""
        if self.prefix_cache.disk is not None:
            self.prefix_cache.disk.forget(owner)

    # ---- close ---------------------------------------------------------------
    def close(self) -> None:
        """End every request (one `Finished` each), stop the lanes and free the
        model and all KV. Blocks until the lanes have stopped: an app calls it
        off its GUI thread."""
        if self._closed:
            return
        self._closed = True
        self._life.close()  # lifecycle.py: the lanes, remotes and disk tier stopped in order
        self.model_info = None
        mx.clear_cache()
        return_freed_memory()  # Linux: glibc kept it, and the process stayed at its peak

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
