"""Moving a decoding request between lanes, and what a lane asks the engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from .request import Request
from .sampling import TokenSampler

if TYPE_CHECKING:
    from .lane import Lane


@dataclass(slots=True, eq=False)
class Handoff:
    """A decoding request moving between lanes: its KV and its next input token."""

    request: Request
    sampler: TokenSampler
    caches: list[KVCache]
    next_token: mx.array  # shape (1,), sampled but not yet streamed


class Director(Protocol):
    """What a lane asks the engine between steps (the engine asks its router)."""

    def decode_lane_for(self, request: Request, lane: "Lane") -> str: ...

    def move_for(self, request: Request, lane: "Lane") -> str | None: ...

    def hand_off(self, handoff: Handoff, to_lane: str) -> None: ...

    def others_busy(self, lane: "Lane") -> bool: ...
