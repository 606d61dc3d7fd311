"""A decoding request's device state while it moves between lanes."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from .sampling import TokenSampler


@dataclass(slots=True, eq=False)
class Handoff:
    """KV, sampler (PRNG key) and the sampled-but-unread next input token."""

    sampler: TokenSampler
    caches: list[KVCache]
    next_token: mx.array  # shape (1,)
