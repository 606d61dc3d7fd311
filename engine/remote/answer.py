"""One answer from a remote lane (lane.py): the body a request is sent
with, what its stream said besides the text (`Answer`), a remote model's
text without a local tokenizer (`PlainText`), and the probe's parameters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..core.params import SamplingParams
from ..core.remote_limits import OutputBudget
from ..core.request import Request


class PlainText:
    """A request's text without a local tokenizer (a remote model's chat):
    what the server streamed, answer and thinking apart."""

    stopped = False
    stop_hit: str | None = None  # the server applies stop strings (Finished.stop_sequence)
    tool_calls: tuple = ()  # a remote model's calls are not read apart (yet)
    ended_in_call = False

    def __init__(self):
        self.text = ""
        self.reasoning = ""

    def add_text(self, text: str) -> tuple[str, str]:
        self.text += text
        return text, ""

    def finish(self) -> tuple[str, str]:
        return "", ""

    def take_calls(self) -> tuple[str, ...]:
        return ()


def request_body(request: Request, model: str, prompt_as_ids: bool,
                 decode: Callable[[list[int]], str] | None) -> dict:
    """The JSON body `request` is sent with: a chat's messages (a remote
    model), else its prompt as token ids or, to a server that refuses them,
    as text; its sampling fields where they differ from the defaults."""
    p = request.params
    body = {"model": model, "temperature": p.temperature, "top_p": p.top_p}
    if not request.open_ended:  # else the server's own: to the end of its context
        body["max_tokens"] = p.max_tokens
    if request.messages is not None:  # a remote model: its own template
        body["messages"] = request.messages
        if request.messages and request.messages[-1].get("role") == "assistant":
            # Continue that answer (vLLM's fields; other servers start anew).
            body.update(continue_final_message=True, add_generation_prompt=False)
    else:
        body["prompt"] = (request.prompt_ids if prompt_as_ids
                          else decode(request.prompt_ids))
    if p.stop:
        body["stop"] = list(p.stop)
    if p.seed is not None:
        body["seed"] = p.seed
    for name, default in (("top_k", 0), ("min_p", 0.0), ("repetition_penalty", 1.0)):
        if getattr(p, name) != default:
            body[name] = getattr(p, name)
    return body


@dataclass(slots=True)
class Answer:
    """One answer in flight: what was believed and predicted as it was sent,
    then what its stream said besides the text."""
    budget: OutputBudget  # its text, held to max_tokens
    believed: int  # prompt tokens the remote was believed to hold cached
    n_at_start: int  # answers streaming as it was sent (at least 1)
    predicted: float | None  # the cost model's seconds (None: the probe)
    sent: float  # time.monotonic() as it was sent
    first: float | None = None  # ... when its first text came
    finish: str | None = None
    usage_cached: int | None = None  # the server's counts, as reported
    usage_out: int | None = None  # (clamped to max_tokens)
    usage_prompt: int | None = None
    concurrency: float = 0.0  # answers streaming, summed over its chunks
    seen: int = 0  # its chunks

    def read(self, chunk, max_tokens: int, streaming: int) -> None:
        """A chunk's counts and finish reason, with `streaming` answers in flight."""
        self.concurrency += max(streaming, 1)
        self.seen += 1
        if chunk.cached_tokens is not None:
            self.usage_cached = chunk.cached_tokens
        if chunk.completion_tokens is not None:
            self.usage_out = min(chunk.completion_tokens, max_tokens)
        if chunk.prompt_tokens is not None:
            self.usage_prompt = chunk.prompt_tokens
        self.finish = chunk.finish_reason or self.finish


def probe_params() -> SamplingParams:
    return SamplingParams(max_tokens=16)
