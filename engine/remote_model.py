"""A model that runs only on a remote server: for a model too big for this
machine, or one nobody loaded here. The app offers it as a model of its own
(a remote lane serving the loaded model is routed to instead, remotes.py).

`RemoteModelEngine` satisfies `EngineAPI` (interface.py), as `Engine` does;
its `capabilities` say what it cannot do here (no local lanes, no remote
lanes of its own, no logprobs, grammars or tools). Chats go to the server's /v1/chat/completions (its own chat template;
there is no tokenizer here, so prompt sizes are estimates until the server's
usage says), through the same `RemoteLane`, director, circuit breaker and
events as a remote lane. When the server fails mid-answer there is no local
model to go on with: the request ends with the error and the text it had.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from .core.director import Director
from .core.errors import EngineError
from .core.events import Finished, Queued
from .core.laneconfig import LaneInfo
from .core.memory import MemoryPlan
from .core.params import Grammar, SamplingParams
from .core.policies import CostAwarePolicy
from .core.remote import RemoteSpec
from .core.request import Request
from .handle import RequestHandle
from .hub import EventHub, Observer
from .interface import Capabilities, Prepared
from .models.gendefaults import GenerationDefaults
from .remote.io import RemoteIO
from .remote.answer import PlainText
from .remote.lane import RemoteLane

CHARS_PER_TOKEN = 4  # a queued prompt's size for the router, before the server counts it
DEFAULT_CONTEXT = 32_768


@dataclass(frozen=True)
class RemoteModelInfo:
    label: str
    source: str  # "remote:<lane name>": what the app loads it by
    name: str  # the server's model id


class RemoteModelEngine:
    is_remote_model = True  # the app reads it until it asks `capabilities`
    tokenizer = None  # counts are estimates until the server's usage (count_tokens)
    thinking_format = None

    def __init__(self, spec: RemoteSpec, api_key: str | None = None,
                 context_length: int = DEFAULT_CONTEXT, sample_interval_s: float = 0.5):
        self.spec = spec
        self.context_length = context_length
        self.generation_defaults = GenerationDefaults()
        self.model_info = RemoteModelInfo(f"{spec.model or 'remote model'} (at {spec.host})",
                                          f"remote:{spec.name}", spec.model)
        self.memory_plan = MemoryPlan(0, 0, 0, 0, (), context_length=context_length)
        self.lanes: dict = {}  # no local lane
        self._closed = False
        self._hub = EventHub()
        self.director = Director(CostAwarePolicy(), self._hub.emit, context_length, set())
        self._io = RemoteIO()
        self.remote = RemoteLane(
            spec, api_key, self.director, self._io, encode=None, decode=None,
            probe_ids=[0] * 4, give_back=self._failed, on_change=lambda lane: None,
            local_names=None, probe_messages=[{"role": "user", "content": "Say hello."}])
        self.director.add_lane(self.remote.scheduler)
        self._hub.start()
        self.remote.start()
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, args=(sample_interval_s,),
                                         name="lane-sampler", daemon=True)
        self._sampler.start()

    @classmethod
    def load(cls, spec: RemoteSpec, api_key: str | None = None,
             ready_s: float | None = 60.0) -> "RemoteModelEngine":
        """Connect and wait for its probe; raises EngineError when it is unusable."""
        engine = cls(spec, api_key)
        if ready_s is not None:
            engine.wait_ready(ready_s)
        lane = engine.remote
        if lane.failed or lane.phase == "down":
            why = lane.failed or lane.scheduler.breaker.reason
            engine.close()
            raise EngineError(f"The remote model at {spec.host} cannot be used: {why}",
                              "lane-failed")
        engine.model_info = RemoteModelInfo(f"{lane.model} (at {spec.host})",
                                            f"remote:{spec.name}", lane.model)
        return engine

    # ---- the engine API (interface.py) ----------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        """One mode (its director's: the server is its only lane); its server
        renders the template; no logprobs, grammars or tools (yet)."""
        return Capabilities(modes=(self.mode,), remote_lanes=False, renders_locally=False,
                            logprobs=False, grammars=False, tools=False)

    @property
    def mode(self) -> str:
        return self.director.mode

    @property
    def thinks(self) -> bool:
        """False: a reasoning model's thinking arrives apart (reasoning_content)."""
        return False

    def set_mode(self, mode: str) -> None:
        if mode not in self.capabilities.modes:
            raise EngineError("This model runs on a remote server: there is no local lane "
                              "to switch to.", "bad-argument")

    def wait_ready(self, timeout: float | None = None, every_lane: bool = False) -> bool:
        return self.remote.ready.wait(timeout)

    def render(self, messages):
        raise EngineError("This model runs on a remote server, which applies its own chat "
                          "template: send messages.", "bad-argument")

    def default_params(self, **overrides) -> SamplingParams:
        return SamplingParams(**{**self.generation_defaults.as_dict(), **overrides})

    def count_tokens(self, text: str) -> int:
        """An estimate (there is no tokenizer here): a token per 3 ASCII
        characters (English and code run 3-4) and one per other character
        (CJK, emoji: about one or more each), rounded up, so that a budget
        errs on the safe side."""
        ascii_chars = sum(1 for c in text if c < "\x80")
        return -(-ascii_chars // 3) + len(text) - ascii_chars

    def prepare(self, messages: list[dict], *, continue_from: str | None = None,
                tools: list[dict] | None = None, grammar: Grammar | None = None,
                tool_choice=None) -> Prepared:
        """The chat checked and kept as messages (its server renders them);
        an answer being continued is its trailing assistant message."""
        if tools:
            raise EngineError("Tools are not available from a remote model (yet).",
                              "bad-argument")
        if grammar is not None:
            raise EngineError("Logprobs and grammars are not available from a remote model "
                              "(yet).", "bad-argument")
        if not messages:
            raise EngineError("A remote model takes chat messages (its server applies the "
                              "template), not token ids.", "bad-argument")
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("content"), str):
                raise EngineError(f"Message {i + 1} has no text content.", "bad-argument")
        tail = [{"role": "assistant", "content": continue_from}] if continue_from else []
        return Prepared([dict(m) for m in messages] + tail, None, None, continue_from or None)

    def prepare_prompt(self, prompt: str | list[int], *,
                       grammar: Grammar | None = None) -> Prepared:
        raise EngineError("A remote model takes chat messages (its server applies the "
                          "template), not token ids.", "bad-argument")

    def submit(self, prepared: Prepared | list[dict] | None = None,
               params: SamplingParams | None = None, *, tab_id: str | None = None,
               prompt_ids: list[int] | None = None, thinking: bool = True,
               tools: list[dict] | None = None, tool_choice=None) -> RequestHandle:
        """Queue a chat that `prepare` made (or, the shorthand, its messages)."""
        if self._closed:
            raise EngineError("The engine is closed.", "closed")
        if params is not None and params.needs_local_lane:
            raise EngineError("Logprobs and grammars are not available from a remote model "
                              "(yet).", "bad-argument")
        if not isinstance(prepared, Prepared):
            if prompt_ids is not None:
                self.prepare_prompt(prompt_ids)  # refused
            prepared = self.prepare(prepared, tools=tools, tool_choice=tool_choice)
        elif prepared.messages is None or prepared.prompt_ids is not None:
            raise EngineError("A remote model takes chat messages (its server applies the "
                              "template), not token ids.", "bad-argument")
        request = self._request(prepared.messages, params or SamplingParams(), tab_id)
        try:
            lane, routed = self.director.place(request)
        except EngineError:  # it is down (or off): say why and when it is tried again
            why = self.remote.failed or self.remote.scheduler.breaker.describe()
            raise EngineError(f"The remote model at {self.spec.host} is not answering: {why}",
                              "lane-failed") from None
        handle = RequestHandle(request, self.cancel)
        self._hub.register(handle)
        self._hub.emit(Queued(request.request_id, tab_id, prompt_tokens=request.num_prompt))
        self._hub.emit(routed)
        if lane.enqueue(request):
            self.remote.wake()
        else:
            why = self.remote.failed or self.remote.scheduler.breaker.describe()
            self.director.finish(request, "error", self.remote.name,
                                 error=f"The remote model is not answering: {why}")
        return handle

    def _request(self, messages: list[dict], params: SamplingParams,
                 tab_id: str | None) -> Request:
        estimate = max(1, sum(len(m["content"]) for m in messages) // CHARS_PER_TOKEN)
        request = Request(prompt_ids=[0] * estimate, params=params, tab_id=tab_id,
                          messages=[dict(m) for m in messages])
        request.text = PlainText()
        return request

    def generate(self, prepared: Prepared | list[dict] | None = None,
                 params: SamplingParams | None = None, *,
                 prompt_ids: list[int] | None = None, timeout: float | None = None) -> Finished:
        return self.submit(prepared, params, prompt_ids=prompt_ids).result(timeout)

    def parse_tool_call(self, text: str, tools: list[dict] | None = None):
        raise ValueError("this model has no tool-call format")

    def cancel(self, request_id: str) -> None:
        handle = self._hub.handle(request_id)
        if handle is not None:
            handle.request.cancel_event.set()
            if not self.director.cancel_waiting(handle.request):
                self.remote.cancel(request_id)

    def cancel_tab(self, tab_id: str) -> None:
        for rid in self._hub.ids_of_tab(tab_id):
            self.cancel(rid)

    def subscribe(self, observer: Observer):
        return self._hub.subscribe(observer)

    def lane_info(self) -> list[LaneInfo]:
        lane = self.remote
        return [LaneInfo(lane.name, "remote", "remote", lane.failed, lane.phase)]

    def describe_lanes(self) -> dict[str, str]:
        return {self.remote.name: self.remote.describe()}

    def memory(self) -> dict[str, int]:
        return {"active": 0, "peak": 0, "kv": 0, "prefix_cache": 0}

    def add_remote(self, spec, api_key=None):
        raise EngineError("Remote lanes route a local model; this model is itself remote.",
                          "bad-argument")

    def remove_remote(self, name: str) -> None:
        return None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._sampler.join()
        self.remote.close()
        self._io.stop()
        self._hub.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- internals ---------------------------------------------------------------
    def _failed(self, request: Request, received: str, why: str) -> None:
        """The server failed or refused it; nothing here can go on with it.
        The text it streamed stays shown (the app keeps it with the error)."""
        self.director.finish(request, "error", self.remote.name,
                             error=f"{why} (no local model to go on with)")

    def _sample(self, interval: float) -> None:
        from .remotes import remote_samples

        last: dict = {}
        while not self._stop.wait(interval):
            for sample in remote_samples({self.remote.name: self.remote}, last,
                                         time.perf_counter()):
                self._hub.emit(sample)
