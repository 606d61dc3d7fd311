"""Sampling parameters of one request."""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import EngineError


@dataclass(slots=True, frozen=True)
class SamplingParams:
    """How to pick tokens and when to stop. temperature 0 means greedy."""

    max_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    repetition_context_size: int = 64
    seed: int | None = None
    stop: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self):
        if self.max_tokens < 1:
            raise EngineError("max_tokens must be at least 1.", "bad-argument")
        if self.temperature < 0:
            raise EngineError("temperature must be >= 0.", "bad-argument")
        if not 0 < self.top_p <= 1:
            raise EngineError("top_p must be in (0, 1].", "bad-argument")
        if self.top_k < 0 or self.min_p < 0 or self.repetition_penalty <= 0:
            raise EngineError("top_k, min_p must be >= 0 and repetition_penalty > 0.",
                              "bad-argument")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(s for s in self.stop if s))

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def has_processors(self) -> bool:
        return self.repetition_penalty != 1.0
