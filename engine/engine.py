"""The engine: loads a model, plans memory, owns the lanes, emits events.

It coordinates; it does not schedule: each lane's `LaneScheduler` plans its
steps and the shared `Director` routes between lanes. All MLX work runs on
lane threads. It satisfies `EngineAPI` (interface.py), as a remote model's
engine does. `prepare`, `submit`, `cancel`, `set_mode`, `subscribe` and
`close` are safe from any thread.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from typing import Callable

import mlx.core as mx

from .core import priority
from .core.director import Director
from .drafts import attach, aux_models, check_lanes, load_draft
from .embeddings import Embedder, embedding_aux
from .core.errors import EngineError
from .core.events import Finished, MemoryPlanned, Queued, Routed
from .core.laneconfig import LaneConfig, LaneInfo, LaneSpec
from .core.params import Grammar, SamplingParams
from .core.policies import CostAwarePolicy
from .core.request import Request
from .core.router import MODES, LeastLoadedPolicy, Policy
from .hub import EventHub, Observer
from .handle import RequestHandle
from .interface import Capabilities, Prepared
from .lane_reports import describe_lanes, sample_lanes
from .runtime.lane_restart import LaneRestarts
from .remotes import Remotes
from .restore import Restorer, open_disk_tier
from .models.call_json import checked_call
from .models.chat_template import has_chat_template
from .models.tools import plan_tools, tool_format
from .prompt import check_ids, encode_raw, render_messages, with_grammar
from .models.loader import LoadedModel, load_model
from .runtime import blas, wired
from .runtime.allocator import return_freed_memory
from .runtime.cachekinds import cache_profile
from .runtime.constrain import Constraints
from .runtime.coststore import CostStore
from .runtime.lane import Lane
from .runtime.placement import plan_lanes
from .runtime.prefix import PrefixCache
from .runtime.textstream import thinking_format
from .watchdog import WARM_UP_S, WATCHDOG_S

FIRST_LANE_WAIT_S = 600.0  # how long an app waits for the first lane to serve
DISK_DRAIN_S = 10.0  # how long close() waits for the disk tier's writes


def gpu_available() -> bool:
    """Whether MLX has a usable GPU here (Metal on macOS, CUDA on Linux);
    where Metal is reported but cannot run kernels, the CPU becomes MLX's
    default device (engine/models/diagnostics.py)."""
    from .models.diagnostics import gpu_usable

    return gpu_usable()[0]


def default_lanes(drafts: str = "off") -> list[LaneSpec]:
    """A GPU lane (when MLX has one) and a CPU lane; `drafts` for each
    (LaneConfig.drafts: "off", "lookup" or "model")."""
    config = LaneConfig(drafts=drafts) if drafts != "off" else None
    if gpu_available():
        return [LaneSpec("gpu", "gpu", config=config), LaneSpec("cpu", "cpu", config=config)]
    return [LaneSpec("cpu", "cpu", config=config)]


def _with_images(request: Request, routed: Routed) -> Routed:
    """A vision request's routing says how many images its prefill encodes:
    those past its prefix found in the cache or read back from disk (the
    timeline: "prefill (2 images)")."""
    if request.vision is None:
        return routed
    found = max(routed.cached_tokens, request.restored_tokens or 0)
    return dataclasses.replace(routed, images=request.vision.images_from(found))


class Engine:
    """Continuous-batching inference over one model on one or more lanes."""

    def __init__(self, loaded: LoadedModel, lanes: list[LaneSpec] | None = None,
                 mode: str | None = None, policy: Policy | None = None,
                 prefix_cache_bytes: int | None = None, prefix_block_size: int = 16,
                 sample_interval_s: float = 0.1, worker_nice: int = 0,
                 memory_budget_bytes: int | None = None, warm_up_s: float = WARM_UP_S,
                 watchdog_s: float = WATCHDOG_S, cost_store: str | None = None,
                 remotes: list | None = None, draft: LoadedModel | None = None,
                 kv_cache_dir: str | None = None, kv_cache_bytes: int | None = None,
                 embedding_model=None):
        """Returns at once: the lanes warm up on their own threads (a GPU
        compiles its kernels there) and requests submitted meanwhile queue
        until a lane is ready; `wait_ready` waits for that.

        `worker_nice` > 0 runs the engine's threads (lanes, their MLX
        streams, OpenBLAS's workers) at that niceness on Linux, so that an app's
        GUI thread gets the cores first; see engine/core/priority.py.
        `memory_budget_bytes` overrides the machine's budget for the plan.
        `warm_up_s`: a lane not serving this long after it started is turned
        off, with the reason shown. `watchdog_s`: the least time a step may run
        before the watchdog dumps every thread's stack and fails the lane's
        requests (it allows ten times the longest step the lane's cost model
        expects, or twenty times its warm-up, if more). `cost_store`: a JSON file where lanes' learned contention is
        kept between runs (engine/runtime/coststore.py). `remotes`: remote
        lanes to add, each a `RemoteSpec` or (spec, API key) (`add_remote`).
        `draft`: a draft model (drafts.py; every lane drafts with it unless
        `lanes` say otherwise). `kv_cache_dir`: the disk tier's folder (KV of
        finished answers kept there and read back after a restart:
        engine/restore.py; None: no disk tier), `kv_cache_bytes` its budget."""
        specs = check_lanes(lanes or default_lanes(), draft, loaded)
        self.draft_model = draft
        self.embedder = Embedder(self, embedding_model)  # embeddings.py (None: no model)
        if len({s.name for s in specs}) != len(specs):
            raise EngineError("Lane names must be unique.", "bad-argument")
        self._take_model(loaded, worker_nice)
        self.watchdog_s = watchdog_s
        self._hub = EventHub(worker_nice)  # handles and observers hear here (hub.py)
        self._closed = False
        self._ready = threading.Condition()
        models = self._plan_memory(loaded, specs, memory_budget_bytes, prefix_cache_bytes,
                                   prefix_block_size)
        disk = (open_disk_tier(self.prefix_cache, loaded, kv_cache_dir, kv_cache_bytes)
                if kv_cache_dir else None)
        self.restorer = (Restorer(self.prefix_cache, self._route, self._cancelled,
                                  lambda: [lane.scheduler.prefill_rate()
                                           for lane in self.lanes.values() if not lane.failed])
                         if disk is not None else None)
        enabled = [s for s in specs if self.memory_plan.lane(s.name).enabled]
        self._hold_wired(enabled)
        remotes = [r if isinstance(r, tuple) else (r, None) for r in remotes or ()]
        self._make_director(loaded, enabled, policy, mode, bool(remotes))
        self.cost_store = CostStore(cost_store, loaded.name, enabled) if cost_store else None
        stored = self.cost_store.load() if self.cost_store else {}
        self._build_lanes(enabled, models, warm_up_s, stored,
                          calibrate=len(enabled) > 1 or bool(remotes))
        del models
        self.remotes = Remotes(self, emit=self._emit, on_change=self._remote_changed,
                               on_routed=self._remote_routed)
        self._start(sample_interval_s)
        for spec, key in remotes:
            self.add_remote(spec, key)

    def _hold_wired(self, enabled: list[LaneSpec]) -> None:
        """Metal: MLX may keep the weights and KV resident while a GPU lane is
        open, as mlx-lm's generate does (runtime/wired.py); the note says
        when the model comes near what the GPU should keep resident."""
        self._wired = any(s.device == "gpu" for s in enabled)
        self.wired_note = (wired.acquire(self.memory_plan.shared_weight_bytes)
                           if self._wired else None)

    def _take_model(self, loaded: LoadedModel, worker_nice: int) -> None:
        """What the engine answers with about its model: defaults, tokenizer,
        thinking and tool-call formats, vocabulary; grammars over its tokenizer."""
        self.model_info = loaded
        self.generation_defaults = loaded.generation_defaults  # the model's own (gendefaults.py)
        self.tokenizer = loaded.tokenizer
        self.thinking_format = thinking_format(loaded.tokenizer)  # None: it does not think
        self.tool_format = tool_format(loaded.tokenizer)  # None: its template has no tools
        self.context_length = loaded.context_length
        args = getattr(loaded.model, "args", None)
        self.vocab_size = int(getattr(args, "vocab_size", 0) or len(loaded.tokenizer.vocab))
        # Grammars (constrained decoding): llguidance over the model's tokenizer.
        self.constraints = Constraints(loaded.tokenizer._tokenizer, loaded.stop_token_ids,
                                       self.vocab_size, nice=worker_nice)
        self.worker_nice = worker_nice

    def _plan_memory(self, loaded: LoadedModel, specs: list[LaneSpec], budget: int | None,
                     prefix_cache_bytes: int | None, block_size: int) -> dict:
        """The memory plan, the prefix cache and the lanes left off; returns
        each enabled lane's model object."""
        model_type = getattr(loaded.model, "model_type", None) or type(loaded.model).__module__
        # A cache kind mlx-lm cannot batch fails here, before any lane starts.
        self.cache_profile = cache_profile(loaded.model, model_type.rsplit(".", 1)[-1])
        self.memory_plan, models = plan_lanes(loaded, specs, budget,
                                              aux_models(self.draft_model, loaded)
                                              + embedding_aux(self.embedder.model))
        if prefix_cache_bytes is None:
            prefix_cache_bytes = self.memory_plan.prefix_cache_bytes
        self.prefix_cache = PrefixCache(block_size, prefix_cache_bytes)
        self.prefix_cache.off_reason = self.cache_profile.prefix_off_reason
        self.disabled_lanes = {lp.name: lp.reason for lp in self.memory_plan.lanes
                               if not lp.enabled}
        return models

    def _make_director(self, loaded: LoadedModel, enabled: list[LaneSpec],
                       policy: Policy | None, mode: str | None, remotes: bool) -> None:
        """The director with the policy and mode asked for, else the defaults:
        cost-aware with two lanes or a remote, hybrid with a GPU and a second lane."""
        self._policy_chosen, self._mode_chosen = policy is not None, mode is not None
        policy = policy or (CostAwarePolicy() if len(enabled) > 1 or remotes
                            else LeastLoadedPolicy())
        if mode is None:
            has_gpu = any(s.kind == "gpu" for s in enabled)
            mode = ("hybrid" if has_gpu and len(enabled) > 1 else
                    "gpu-only" if has_gpu else "cpu-only")
        self.director = Director(policy, self._emit, loaded.context_length,
                                 loaded.stop_token_ids, mode)

    def _build_lanes(self, enabled: list[LaneSpec], models: dict, warm_up_s: float,
                     stored: dict[str, float], calibrate: bool) -> None:
        self.lanes: dict[str, Lane] = {}
        self.restarts = LaneRestarts(self)  # a lane whose step raised is replaced
        measure = threading.Lock()  # calibrations are timed one lane at a time
        for spec in enabled:
            lane_plan = self.memory_plan.lane(spec.name)
            lane = Lane(spec.name, spec.device, spec.kind, models[spec.name], self.director,
                        self.prefix_cache, self.lanes, spec.config,
                        self.memory_plan.kv_bytes_per_token, lane_plan.kv_budget_bytes,
                        nice=self.worker_nice, calibrate=calibrate, measure_lock=measure,
                        warm_up_s=warm_up_s, contention=stored.get(spec.name, 0.0),
                        on_ready=self._lane_ready, vocab=self.vocab_size,
                        draft_model=self.draft_model.model if self.draft_model else None)
            self.lanes[spec.name] = self.restarts.watch(lane)
            self.director.add_lane(lane.scheduler)

    def _start(self, sample_interval_s: float) -> None:
        """Delivery, the lanes and the sampler start. Every lane warms up at
        once on its own thread (calibration is timed one lane at a time);
        nothing here waits for them: a lane serves as soon as it is ready and
        requests queue until one is."""
        for tid in blas.blas_thread_ids:
            priority.lower_thread(self.worker_nice, tid)
        self._hub.start()
        self._emit(MemoryPlanned("", None, plan=self.memory_plan))
        for lane in self.lanes.values():
            lane.start()
        self._sampler_stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample_lanes, args=(sample_interval_s,),
                                         name="lane-sampler", daemon=True)
        self._sampler.start()

    def wait_ready(self, timeout: float | None = None, every_lane: bool = False) -> bool:
        """Wait until a lane serves (`every_lane`: until every lane's start-up
        has ended, remote lanes' probes included). True if so within `timeout`; raises EngineError when every
        lane failed to start, with each one's reason."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def done() -> bool:
            lanes = self.lanes.values()
            if all(lane.failed for lane in lanes):
                return True
            if every_lane:  # remote lanes too: their probe answered, or they are down
                return (all(lane.ready.is_set() or lane.failed for lane in lanes)
                        and all(r.ready.is_set() for r in self.remotes.lanes.values()))
            return any(lane.ready.is_set() and not lane.failed for lane in lanes)

        with self._ready:
            while not done():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._ready.wait(left if left is None else min(left, 1.0))
        if not any(lane.failed is None for lane in self.lanes.values()):
            why = "; ".join(lane.failed or "" for lane in self.lanes.values())
            raise EngineError(f"No lane could start: {why}", "lane-failed")
        return True

    @classmethod
    def load(cls, model: str = "default", lanes: list[LaneSpec] | None = None,
             mode: str | None = None, ready_s: float | None = FIRST_LANE_WAIT_S,
             draft_model: str | None = None, **kwargs) -> "Engine":
        """Load `model` ('default', a GGUF file, a model folder or a repo id)
        and wait until a lane serves (at most `ready_s`; None: do not wait).
        `draft_model`: a model to draft with (drafts.py), named the same ways.
        Raises EngineError when the model cannot load or no lane can start."""
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

    # ---- API ---------------------------------------------------------------
    def clear_saved_kv(self) -> int:
        """Remove this model's KV kept on disk (the disk tier); the bytes freed."""
        disk = self.prefix_cache.disk
        return disk.clear() if disk is not None else 0

    def forget_saved_kv(self, owner: str) -> None:
        """`owner` (a request's `tab_id`: a deleted chat) is gone: the saved
        KV segments no other chat or client uses are removed, after the saves
        queued before (engine/runtime/kv_owners.py)."""
        if self.prefix_cache.disk is not None:
            self.prefix_cache.disk.forget(owner)

    def embed(self, inputs: list, tab_id: str | None = None):
        """Embed texts (or token-id lists) with the embedding model; a handle
        whose `result(timeout)` gives the vectors (engine/embeddings.py)."""
        return self.embedder.submit(inputs, tab_id)

    def set_embedding_model(self, model) -> None:
        """Embed with `model` (models/embedding.py) from now on; None: none."""
        self.embedder.set_model(model)

    def set_draft_model(self, draft: LoadedModel | None) -> None:
        """Draft with `draft` from now on where a lane or a request asks for a
        draft model (None: none); EngineError if it cannot draft for this
        model (engine/drafts.py)."""
        attach(self, draft)

    @property
    def mode(self) -> str:
        return self.director.mode

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

    @property
    def thinks(self) -> bool:
        """A reasoning model: its answers can begin with thinking (`<think>`
        and the other markers mlx-lm infers, or gpt-oss's channels)."""
        return self.thinking_format is not None

    def render(self, messages: list[dict[str, str]], tools: list[dict] | None = None) -> list[int]:
        """Token ids of `messages` in the model's chat template, ready to answer
        (with `tools`, OpenAI-style, offered to the model). Message text is
        data: text that spells a control token stays plain text
        (engine/prompt.py, engine/models/chat_template.py)."""
        return render_messages(self.tokenizer, messages, tools)

    def parse_tool_call(self, text: str, tools: list[dict] | None = None):
        """One raw tool call (`Finished.tool_calls`) read by the model's parser
        (mlx-lm's): {"name", "arguments"} or a list of them; ValueError (or
        the parser's own error) when it cannot be read. Arguments holding a
        number JSON cannot carry are the model's text, or unread
        (models/call_json.py)."""
        if self.tool_format is None:
            raise ValueError("this model has no tool-call format")
        return checked_call(self.tool_format.parse(text, tools), text)

    def default_params(self, **overrides) -> SamplingParams:
        """The model's own sampling defaults (generation_config.json or GGUF
        metadata, else Tandem's), with `overrides`; `SamplingParams()` is greedy."""
        return SamplingParams(**{**self.generation_defaults.as_dict(), **overrides})

    @property
    def capabilities(self) -> Capabilities:
        """What this engine can do now (engine/interface.py): the modes its
        lanes allow, remote lanes, logprobs, grammars, tools if the model's
        template has a tool-call format, and chats if it has a template (a
        vision model's may be its processor's)."""
        return Capabilities(modes=self._modes(), remote_lanes=True, renders_locally=True,
                            logprobs=True, grammars=True, tools=self.tool_format is not None,
                            images=getattr(self.model_info.model, "reads_images", False),
                            drafts=any(lane.runner.batch.drafts is not None
                                       for lane in self.lanes.values()),
                            chat=has_chat_template(self.tokenizer) or has_chat_template(
                                getattr(self.model_info.model, "processor", None)))

    def count_tokens(self, text: str) -> int:
        """How many tokens `text` adds to a message: the model's tokenizer,
        no special tokens added. Safe from any thread."""
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def prepare(self, messages: list[dict], *, continue_from: str | None = None,
                tools: list[dict] | None = None, grammar: Grammar | None = None,
                tool_choice=None) -> Prepared:
        """A chat made ready for `submit`, on the calling thread (an app calls
        it off its GUI thread: a long chat takes a while): the messages in the
        model's chat template with `tools` offered (`tool_choice` "none"
        offers none; "required" or a named function forces a call by a
        grammar), tokenized; `continue_from`, the text of an interrupted
        answer, appended to be written further; `grammar` (or the forced
        call's) built, so `submit` finds it cached. EngineError says what is
        wrong with any of it."""
        offered, shaped, calls = plan_tools(self.tool_format, tools, tool_choice,
                                            SamplingParams(grammar=grammar),
                                            self.tokenizer._tokenizer)
        if any(m.get("images") for m in messages or () if isinstance(m, dict)):
            return self._prepare_images(messages, offered, shaped, calls, continue_from)
        ids = self.render(messages or [], offered)
        if continue_from:
            ids += list(self.tokenizer.encode(continue_from, add_special_tokens=False))
        if shaped.grammar is not None:  # a big schema takes a while to build
            self.prepare_grammar(shaped.grammar)
        return Prepared(list(messages or []), ids, shaped.grammar, continue_from or None,
                        offered, calls)

    def _prepare_images(self, messages, offered, shaped, calls, continue_from) -> Prepared:
        """A chat with images, through the vision model's processor
        (engine/models/vision.py): its key ids and VisionInputs."""
        from .models.chat_template import special_strings
        from .models.vision import render_with_images

        if not self.capabilities.images:
            raise EngineError(f"{self.model_info.label} cannot read images: it is a text "
                              "model. Load a vision model to send images.", "bad-argument")
        keys, vision = render_with_images(self.model_info.model, messages, self.vocab_size,
                                          special_strings(self.tokenizer._tokenizer), offered,
                                          continue_from)
        if shaped.grammar is not None:
            self.prepare_grammar(shaped.grammar)
        return Prepared(list(messages), keys, shaped.grammar, continue_from or None, offered,
                        calls, vision)

    def prepare_prompt(self, prompt: str | list[int], *,
                       grammar: Grammar | None = None) -> Prepared:
        """A raw completion prompt made ready for `submit`: text tokenized as
        the model's tokenizer does by default, or token ids, each checked
        against the vocabulary; `grammar` built."""
        ids = encode_raw(self.tokenizer, prompt) if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise EngineError("The prompt is empty.", "bad-argument")
        check_ids(ids, self.vocab_size)
        if grammar is not None:
            self.prepare_grammar(SamplingParams(grammar=grammar).grammar)
        return Prepared(None, ids, grammar)

    def submit(self, prepared: Prepared | list[dict] | None = None,
               params: SamplingParams | None = None, *, tab_id: str | None = None,
               prompt_ids: list[int] | None = None, thinking: bool = True,
               tools: list[dict] | None = None, tool_choice=None) -> RequestHandle:
        """Queue a generation of what `prepare` made; safe from any thread.
        Shorthands: `submit(messages, params, tools=, tool_choice=)` and
        `submit(prompt_ids=ids)` go through `prepare` / `prepare_prompt` here.
        A reasoning model's thinking comes apart from its answer
        (`Token.reasoning`, `Finished.reasoning`) unless `thinking` is False
        (raw completions). The model's tool calls come apart as
        `Token.tool_calls` / `Finished.tool_calls` (raw text;
        `parse_tool_call` reads one)."""
        if self._closed:
            raise EngineError("The engine is closed.", "closed")
        params = params or SamplingParams()
        prepared = self._prepared(prepared, params, prompt_ids, tools, tool_choice)
        params = with_grammar(params, prepared.grammar)
        request = self._request(prepared, params, tab_id, thinking)
        if self.restorer is not None and self.restorer.wants(request):
            # Its prefix is on disk: read back first (engine/restore.py), then routed.
            handle = self._register(request, tab_id)
            self.restorer.submit(request)
            return handle
        lane, routed = self.director.place(request)  # raises when it can never fit
        routed = _with_images(request, routed)
        if request.restore_note:  # its prefix is on disk, but prefilling it is sooner
            routed = dataclasses.replace(routed, reason=f"{request.restore_note}; "
                                                        f"{routed.reason}")
        handle = self._register(request, tab_id)
        self._enqueue(request, lane, routed)
        return handle

    def _register(self, request: Request, tab_id: str | None) -> RequestHandle:
        handle = RequestHandle(request, self.cancel)
        self._hub.register(handle)
        self._emit(Queued(request.request_id, tab_id, prompt_tokens=request.num_prompt))
        return handle

    def _enqueue(self, request: Request, lane, routed) -> None:
        self._emit(routed)
        if lane.enqueue(request):
            self.lane(lane.name).wake()
        else:  # the lane failed or closed since it was chosen
            self.director.finish(request, "error", error=lane.failed or "The engine is closed.")

    def _route(self, request: Request) -> None:
        """A restored request (the restorer's thread) is routed as any other."""
        try:
            lane, routed = self.director.place(request)
            routed = _with_images(request, routed)
            if request.restored_tokens:  # the Decisions tab says where its warmth came from
                routed = dataclasses.replace(routed, reason=(
                    f"restored {request.restored_tokens:,} tokens from disk in "
                    f"{request.restore_s or 0:.2f} s; {routed.reason}"),
                    restored_tokens=request.restored_tokens, restore_s=request.restore_s)
            self._enqueue(request, lane, routed)
        except Exception as e:  # never a request left without its Finished
            self.director.finish(request, "error", error=str(e))

    def _cancelled(self, request: Request) -> None:
        self.director.finish(request, "cancelled")

    def _prepared(self, prepared, params: SamplingParams, prompt_ids, tools,
                  tool_choice) -> Prepared:
        """`submit`'s request as a `Prepared`: the shorthands go through `prepare`."""
        if isinstance(prepared, Prepared):
            if prompt_ids is not None or tools or tool_choice is not None:
                raise EngineError("A prepared request has its prompt and tools already "
                                  "(give tools to prepare).", "bad-argument")
            if prepared.prompt_ids is None:
                raise EngineError("This engine renders prompts itself: submit what its "
                                  "own prepare made.", "bad-argument")
            return prepared
        if prompt_ids is not None:
            return self.prepare_prompt(prompt_ids)
        return self.prepare(prepared or [], tools=tools, tool_choice=tool_choice,
                            grammar=params.grammar)

    def _request(self, prepared: Prepared, params: SamplingParams, tab_id: str | None,
                 thinking: bool) -> Request:
        from .runtime.textstream import TextStream

        ids = list(prepared.prompt_ids)
        if not ids:
            raise EngineError("The prompt is empty.", "bad-argument")
        vision = getattr(prepared, "vision", None)
        model_ids = vision.model_ids if vision is not None else ids  # (ids: its cache keys)
        check_ids(model_ids, self.vocab_size)
        # A bad grammar is the caller's error; it is built off the lanes (on
        # the builder's thread, waited for; `prepare` built it already), and
        # a lane only copies it.
        grammar = self.prepare_grammar(params.grammar) if params.grammar is not None else None
        if len(ids) >= self.context_length:
            raise EngineError(
                f"The conversation is {len(ids)} tokens long, more than the model's context "
                f"of {self.context_length} tokens. Start a new chat or shorten it.",
                "prompt-too-long")
        request = Request(prompt_ids=ids, params=params, tab_id=tab_id, vision=vision)
        if params.prediction:
            request.prediction_ids = self.tokenizer.encode(params.prediction,
                                                           add_special_tokens=False)
        request.grammar_matcher = grammar
        request.cached_tokens = self.prefix_cache.cached_length(ids, limit=len(ids) - 1)
        request.prefix_note = self.prefix_cache.off_reason
        request.text = TextStream(self.tokenizer, params.stop,
                                  self.thinking_format if thinking else None, model_ids,
                                  prepared.call_format)
        return request

    def prepare_grammar(self, grammar: Grammar):
        """Build `grammar` (bounded, on a thread of its own, within a time
        limit) or find it built; EngineError says what is wrong with it. An
        app calls it off its GUI thread before `submit`, which then finds it
        cached."""
        return self.constraints.prepare(grammar)

    def cancel(self, request_id: str) -> None:
        """Stop a request at the next step boundary; its slot and KV are freed."""
        handle = self._hub.handle(request_id)
        if handle is not None:
            handle.request.cancel_event.set()
            if self.director.cancel_waiting(handle.request):
                return
            self.remotes.cancel(handle.request)
            for lane in self.lanes.values():  # it may be moving between lanes
                lane.wake()

    def cancel_tab(self, tab_id: str) -> None:
        for rid in self._hub.ids_of_tab(tab_id):
            self.cancel(rid)

    def set_mode(self, mode: str) -> None:
        """'gpu-only' (needs a GPU lane), 'hybrid' (a GPU lane and a second
        lane, or any lane and a remote one) or 'cpu-only'
        (`capabilities.modes` lists those this engine accepts now)."""
        refusal = self._mode_refusal(mode)
        if refusal is not None:
            raise EngineError(refusal, "bad-argument")
        self.director.set_mode(mode)
        for lane in self.all_lanes():
            lane.wake()

    def _mode_refusal(self, mode: str) -> str | None:
        """Why this engine's lanes cannot run `mode` (None: they can)."""
        kinds = [lane.kind for lane in self.lanes.values()]
        remote = bool(self.remotes.lanes)
        if (mode == "gpu-only" or (mode == "hybrid" and not remote)) and "gpu" not in kinds:
            return (f"Cannot switch to {mode}: this engine has no GPU lane "
                    f"(it runs CPU-only).")
        if mode == "hybrid" and len(kinds) + len(self.remotes.lanes) < 2:
            return ("Cannot switch to hybrid: it needs a second lane "
                    "(see the memory plan for why there is none).")
        return None

    def _modes(self) -> tuple[str, ...]:
        return tuple(mode for mode in MODES if self._mode_refusal(mode) is None)

    def lane(self, name: str):
        """A lane by name: local (engine/runtime/lane.py) or remote (engine/remote/lane.py)."""
        return self.lanes.get(name) or self.remotes.lanes[name]

    def all_lanes(self) -> list:
        return list(self.lanes.values()) + list(self.remotes.lanes.values())

    def add_remote(self, spec, api_key: str | None = None):
        """Add a remote lane (`RemoteSpec`): an OpenAI-compatible server that
        finishes whole requests. Routed to in hybrid mode once it answered a
        probe, if it serves the loaded model; else listed with the reason."""
        if self._closed:
            raise EngineError("The engine is closed.", "closed")
        return self.remotes.add(spec, api_key)

    def remove_remote(self, name: str) -> None:
        self.remotes.remove(name)

    def lane_of(self, request_id: str) -> str | None:
        """The lane holding a request now (None once it finished)."""
        handle = self._hub.handle(request_id)
        return handle.request.lane if handle is not None else None

    def memory(self) -> dict[str, int]:
        """Bytes: MLX active and peak memory, running requests' KV, prefix cache.
        (Plain getters: safe from any thread.)"""
        return {"active": int(mx.get_active_memory()), "peak": int(mx.get_peak_memory()),
                "kv": sum(lane.kv_bytes for lane in self.lanes.values()),
                "prefix_cache": self.prefix_cache.nbytes}

    def subscribe(self, observer: Observer) -> Callable[[], None]:
        """Call `observer(event)` for every event, on engine threads; returns an
        unsubscribe function. The memory plan and the lanes' calibrations, which
        happen at load, are replayed to it first."""
        return self._hub.subscribe(observer)

    def generate(self, prepared: Prepared | list[dict] | None = None,
                 params: SamplingParams | None = None, *,
                 prompt_ids: list[int] | None = None, timeout: float | None = None) -> Finished:
        """Submit and wait: a convenience for scripts and tests."""
        return self.submit(prepared, params, prompt_ids=prompt_ids).result(timeout)

    def close(self) -> None:
        """End every request (one `Finished` each), stop the lanes and free the
        model and all KV. Blocks until the lanes have stopped: an app calls it
        off its GUI thread."""
        if self._closed:
            return
        self._closed = True
        if self.cost_store is not None:
            self.cost_store.save({name: lane.cost for name, lane in self.lanes.items()})
        if hasattr(self, "_sampler"):
            self._sampler_stop.set()
            self._sampler.join()
        if hasattr(self, "restarts"):
            self.restarts.close()  # no lane restarts from now on
        with self.director.lock:  # no lane takes a hand-over from now on
            for lane in self.lanes.values():
                lane.refuse_work()
        self.remotes.close()  # their requests in flight end cancelled
        self.constraints.close()
        for lane in self.lanes.values():
            lane.close()
        if self.restorer is not None:
            self.restorer.close()
        if self._wired:  # the lanes have stopped: no evaluation in flight
            self._wired = False
            wired.release()
        if self.prefix_cache.disk is not None:  # what the lanes queued is written
            if not self.prefix_cache.disk.close(DISK_DRAIN_S):
                print("tandem: KV still being saved was left unsaved at close", file=sys.stderr)
        self._hub.stop()  # what is queued is delivered first
        # Free cached KV now, while MLX is fully alive, not at interpreter exit.
        self.prefix_cache.clear()
        self.model_info = None
        mx.clear_cache()
        return_freed_memory()  # Linux: glibc kept it, and the process stayed at its peak

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def lane_info(self) -> list[LaneInfo]:
        """The running lanes, in order: name, device, role, phase, why one
        failed, and why one restarts (until it serves again)."""
        return [LaneInfo(lane.name, lane.device, lane.kind, lane.failed, lane.phase,
                         lane.restarted_after if lane.warming_up and not lane.failed
                         else None)
                for lane in self.lanes.values()] + self.remotes.info()

    def describe_lanes(self) -> dict[str, str]:
        """One line per lane on what its cost model believes now, for people."""
        return {**describe_lanes(self.lanes.values()), **self.remotes.describe()}

    # ---- internals ---------------------------------------------------------
    def _emit(self, event) -> None:
        self._hub.emit(event)  # engine/hub.py, on the delivery thread

    def _lane_ready(self, lane: Lane) -> None:
        """A lane's start-up ended (or it was turned off): requests queued on
        lanes still warming up (or on it, if it failed) go to a ready lane."""
        self._reroute([lane.name] if lane.failed else
                      [name for name, other in self.lanes.items() if other.warming_up])
        # Loading and warming up freed temporaries (a weight conversion's, a
        # closed engine's buffers freed meanwhile): give them back (Linux).
        return_freed_memory()

    def _remote_changed(self, lane) -> None:
        """A remote lane's probe ended or it went down (remotes.py): its queue
        goes to a ready lane, and lanes still warming up may hand theirs to it."""
        self._reroute([lane.name] + [name for name, local in self.lanes.items()
                                     if local.warming_up])

    def _reroute(self, sources: list[str]) -> None:
        for source in sources:
            for target, event in self.director.reroute_waiting(source):
                self._emit(event)
                self.lane(target).wake()
        with self._ready:
            self._ready.notify_all()

    def _remote_routed(self) -> None:
        """A routed remote makes the engine hybrid (unless a mode was asked
        for), cost-aware (unless a policy was), and its local lanes calibrate
        (the router compares their predicted times with the remote's)."""
        director = self.director
        with director.lock:
            if not self._policy_chosen and isinstance(director.policy, LeastLoadedPolicy):
                director.policy = CostAwarePolicy()
            if not self._mode_chosen and director.mode == "cpu-only":
                director.set_mode("hybrid")
        for lane in self.lanes.values():
            lane.calibrate_soon()

    def _sample_lanes(self, interval: float) -> None:
        sample_lanes(self.lanes, self._emit, self._sampler_stop, interval, self.worker_nice,
                     self.watchdog_s, self.context_length, lambda: self.prefix_cache.nbytes,
                     self.remotes.samples)
