"""A prompt being prefilled, and one chunk of it through the model."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import KVCache

from ..core.laneconfig import SPLIT_LAST_TOKEN_ABOVE
from ..core.request import Request
from .sampling import TokenSampler


@dataclass(slots=True, eq=False)
class Prefill:
    request: Request
    sampler: TokenSampler
    caches: list[KVCache]
    first: mx.array | None = None  # the first output token, sampled by the last chunk


def run_chunk(model: nn.Module, prefill: Prefill, start: int, n: int) -> mx.array:
    """Feed prompt tokens [start, start + n) into the request's caches (lazily);
    returns the logits of the chunk's last position."""
    request = prefill.request
    chunk = mx.array(request.prompt_ids[start : start + n])[None]
    if start + n == request.num_prompt and n > SPLIT_LAST_TOKEN_ABOVE:
        # Only the last position's logits are needed: run the rest apart so
        # the vocabulary projection is computed for one token (MLX never
        # evaluates the unused logits of the first call).
        model(chunk[:, :-1], cache=prefill.caches)
        chunk = chunk[:, -1:]
    return model(chunk, cache=prefill.caches)[:, -1, :]
