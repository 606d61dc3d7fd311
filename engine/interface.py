"""The engine interface: what every engine offers the app and the server.

Two engines satisfy it: `Engine` (engine.py: a model loaded here, on local
lanes, with remote lanes beside them) and `RemoteModelEngine`
(remote_model.py: a model that runs only on a remote server). Callers hold an
`EngineAPI` and ask `engine.capabilities` what this one can do, instead of
asking which class it is; tests/test_engine_interface.py compares every
member's signature with both classes, so they cannot drift apart.

One way in: `prepare` (off the GUI thread: the chat template, the tokenizer,
a grammar's build) returns a `Prepared`; `submit(prepared, params, ...)`
queues it and returns a `RequestHandle` (engine/handle.py). `submit(messages,
params)` and `submit(prompt_ids=...)` are shorthands that go through
`prepare` / `prepare_prompt`.

Plain data and typing only: importing this module loads no MLX (the app's
MLX-free rooms may name these types).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .core.laneconfig import LaneInfo
    from .core.memory import MemoryPlan
    from .core.params import Grammar, SamplingParams
    from .handle import RequestHandle


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do now, as data (`engine.capabilities`)."""

    modes: tuple[str, ...]  # the modes set_mode accepts on this engine now
    remote_lanes: bool  # add_remote / remove_remote do something
    renders_locally: bool  # prepare() renders the template and tokenizes here
    logprobs: bool  # SamplingParams.logprobs is answered
    grammars: bool  # SamplingParams.grammar / prepare(grammar=) is enforced
    tools: bool  # prepare(tools=) offers tools and calls come back
    drafts: bool = False  # its lanes draft (lookup; a draft model: set_draft_model)
    images: bool = False  # image parts in messages
    embeddings: bool = False  # an embeddings endpoint
    saved_kv: bool = False  # KV kept on disk between runs
    chat: bool = True  # prepare() takes chat messages (False: a base model, raw prompts only)


@dataclass(frozen=True, eq=False)
class Prepared:
    """A request's prompt, ready for `submit`: what `prepare` (or
    `prepare_prompt`) made, on whichever thread called it.

    `messages`: the chat as the model answers it (None for a raw prompt);
    for a model whose server renders (`prompt_ids` None) an answer being
    continued is its trailing assistant message. `prompt_ids`: the rendered
    and tokenized prompt, an answer being continued included (None: the
    server renders). `grammar`: what the answer must match (built by
    `prepare`, so `submit` finds it cached; a forced tool call's grammar
    too). `continue_from`: the text of the answer being continued, if any.
    `tools`: the tools offered to the template. `call_format`: how the
    model's tool calls are read (the engine's own; None: none expected)."""

    messages: list[dict] | None
    prompt_ids: list[int] | None
    grammar: "Grammar | None" = None
    continue_from: str | None = None
    tools: list[dict] | None = None
    call_format: Any = None
    # Images (engine/models/vision.py's VisionInputs): then `prompt_ids` are
    # the prefix-cache keys (each image token an id past the vocabulary,
    # from its image's digest) and the model reads `vision.model_ids`.
    vision: Any = None


@runtime_checkable
class EngineAPI(Protocol):
    """The engine API the app and the server use (engine/README.md)."""

    model_info: Any  # .name, .source, .label: what was loaded
    context_length: int
    generation_defaults: Any  # the model's own sampling defaults (models/gendefaults.py)
    memory_plan: "MemoryPlan"

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def mode(self) -> str: ...

    @property
    def thinks(self) -> bool: ...

    def wait_ready(self, timeout: float | None = None, every_lane: bool = False) -> bool: ...

    def default_params(self, **overrides) -> "SamplingParams": ...

    def count_tokens(self, text: str) -> int: ...

    def prepare(self, messages: list[dict], *, continue_from: str | None = None,
                tools: list[dict] | None = None, grammar: "Grammar | None" = None,
                tool_choice=None) -> Prepared: ...

    def prepare_prompt(self, prompt: str | list[int], *,
                       grammar: "Grammar | None" = None) -> Prepared: ...

    def submit(self, prepared: Prepared | list[dict] | None = None,
               params: "SamplingParams | None" = None, *, tab_id: str | None = None,
               prompt_ids: list[int] | None = None, thinking: bool = True,
               tools: list[dict] | None = None, tool_choice=None) -> "RequestHandle": ...

    def generate(self, prepared: Prepared | list[dict] | None = None,
                 params: "SamplingParams | None" = None, *,
                 prompt_ids: list[int] | None = None, timeout: float | None = None): ...

    def parse_tool_call(self, text: str, tools: list[dict] | None = None): ...

    def cancel(self, request_id: str) -> None: ...

    def cancel_tab(self, tab_id: str) -> None: ...

    def set_mode(self, mode: str) -> None: ...

    def subscribe(self, observer: Callable[[object], None]) -> Callable[[], None]: ...

    def lane_info(self) -> list["LaneInfo"]: ...

    def describe_lanes(self) -> dict[str, str]: ...

    def memory(self) -> dict[str, int]: ...

    def add_remote(self, spec, api_key: str | None = None): ...

    def remove_remote(self, name: str) -> None: ...

    def close(self) -> None: ...

    def __enter__(self): ...

    def __exit__(self, *exc) -> None: ...
