"""Sampling parameters of one request."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .errors import EngineError

SEED_LIMIT = 2**64  # MLX's PRNG keys take an unsigned 64-bit seed
MAX_TOP_LOGPROBS = 20  # OpenAI's bound for top_logprobs


def _bad(message: str) -> EngineError:
    return EngineError(message, "bad-argument")


def _integer(name: str, value, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"{name} must be a whole number, not {value!r}.")
    if value < low or (high is not None and value >= high):
        bound = f"from {low} to {high - 1}" if high is not None else f"at least {low}"
        raise _bad(f"{name} must be {bound}; got {value}.")


def _real(name: str, value, low: float, high: float | None = None,
          low_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(f"{name} must be a number, not {value!r}.")
    if not math.isfinite(value):
        raise _bad(f"{name} must be a finite number; got {value}.")
    if value < low or (low_open and value == low) or (high is not None and value > high):
        lower = f"> {low}" if low_open else f">= {low}"
        upper = f" and <= {high}" if high is not None else ""
        raise _bad(f"{name} must be {lower}{upper}; got {value}.")


DRAFT_LIMIT = 32  # draft tokens one step may verify for a request
MAX_PREDICTION_CHARS = 256 * 1024

GRAMMAR_KINDS = ("json_schema", "regex", "lark", "choice")
MAX_GRAMMAR_CHARS = 256 * 1024


@dataclass(slots=True, frozen=True)
class Grammar:
    """What an answer must match, enforced token by token (constrained
    decoding, engine/runtime/constrain.py): a JSON schema (`{"type":
    "object"}` for any JSON object), a regular expression, a Lark grammar or
    a JSON list of choices. Checked by the engine when submitted."""

    kind: str
    text: str

    def __post_init__(self):
        if self.kind not in GRAMMAR_KINDS:
            raise _bad(f"A grammar is one of {', '.join(GRAMMAR_KINDS)}; got {self.kind!r}.")
        if not isinstance(self.text, str) or not self.text or \
                len(self.text) > MAX_GRAMMAR_CHARS:
            raise _bad(f"A grammar's text must be 1 to {MAX_GRAMMAR_CHARS:,} characters.")


@dataclass(slots=True, frozen=True)
class SamplingParams:
    """How to pick tokens and when to stop. temperature 0 means greedy.

    Validated on construction: every value a request carries into a lane is
    one the lane can use (a bad value is the caller's EngineError here, never
    a lane failure later)."""

    # None: no limit short of the context (what is left of it after the
    # prompt; the engine reserves KV for such an answer as it grows,
    # engine/core/reservation.py).
    max_tokens: int | None = 512
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    repetition_context_size: int = 64
    seed: int | None = None
    stop: tuple[str, ...] = field(default_factory=tuple)
    # Log-probabilities of each output token (None: off), with this many of
    # the likeliest alternatives (0 to MAX_TOP_LOGPROBS): the model's raw
    # distribution, before temperature, penalties and filters (as vLLM returns).
    logprobs: int | None = None
    # The answer must match this (None: free text).
    grammar: Grammar | None = None
    # Drafts (a lane with LaneConfig(drafts=...)): the most tokens one step
    # verifies for this request (None: the lane's own choice, up to
    # DRAFT_LIMIT; 0: no drafts for it); text the answer will probably
    # contain, proposed where the answer agrees with it (OpenAI's predicted
    # output); what proposes (None: the lane's mode; "lookup"; "model": the
    # engine's draft model, lookup while it has none). None changes what
    # the request writes, only how fast.
    draft_tokens: int | None = None
    prediction: str | None = None
    drafter: str | None = None

    def __post_init__(self):
        if self.max_tokens is not None:
            _integer("max_tokens", self.max_tokens, 1)
        _real("temperature", self.temperature, 0.0)
        _real("top_p", self.top_p, 0.0, 1.0, low_open=True)
        _integer("top_k", self.top_k, 0)
        _real("min_p", self.min_p, 0.0, 1.0)
        _real("repetition_penalty", self.repetition_penalty, 0.0, low_open=True)
        _integer("repetition_context_size", self.repetition_context_size, 1)
        if self.seed is not None:
            _integer("seed", self.seed, 0, SEED_LIMIT)
        if self.logprobs is not None:
            _integer("logprobs", self.logprobs, 0, MAX_TOP_LOGPROBS + 1)
        if self.draft_tokens is not None:
            _integer("draft_tokens", self.draft_tokens, 0, DRAFT_LIMIT + 1)
        if self.drafter not in (None, "lookup", "model"):
            raise _bad(f"drafter must be 'lookup' or 'model', not {self.drafter!r}.")
        if self.prediction is not None and (not isinstance(self.prediction, str)
                                            or len(self.prediction) > MAX_PREDICTION_CHARS):
            raise _bad(f"prediction must be text of at most {MAX_PREDICTION_CHARS:,} "
                       "characters.")
        if self.grammar is not None and not isinstance(self.grammar, Grammar):
            raise _bad(f"grammar must be a Grammar, not {type(self.grammar).__name__}.")
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        if not all(isinstance(s, str) for s in stop):
            raise _bad(f"stop must be a string or a list of strings; got {self.stop!r}.")
        object.__setattr__(self, "stop", tuple(s for s in stop if s))

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def needs_local_lane(self) -> bool:
        """Logprobs and grammars come from a local lane's forward pass; a
        remote lane does not do them (yet)."""
        return self.logprobs is not None or self.grammar is not None

    @property
    def has_processors(self) -> bool:
        return self.repetition_penalty != 1.0
