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
    # Images (engine/models/vision.py): the prompt's embeddings, the images'
    # features merged in, are the model's input (its ids are cache keys).
    vision = request.vision
    embeds = vision.embeds(model, start, n) if vision is not None else None
    # M-RoPE (Qwen2-VL, Qwen2.5-VL): the prompt's own positions, this chunk's slice.
    positions = vision.positions[..., start : start + n] \
        if vision is not None and vision.positions is not None else None
    if start + n == request.num_prompt and n > SPLIT_LAST_TOKEN_ABOVE:
        # Only the last position's logits are needed: run the rest apart so
        # the vocabulary projection is computed for one token (MLX never
        # evaluates the unused logits of the first call).
        model(chunk[:, :-1], cache=prefill.caches,
              **_embedded(embeds, positions, slice(None, -1)))
        chunk = chunk[:, -1:]
        embeds = embeds[:, -1:] if embeds is not None else None
        positions = positions[..., -1:] if positions is not None else None
    return model(chunk, cache=prefill.caches,
                 **_embedded(embeds, positions, slice(None)))[:, -1, :]


def _embedded(embeds, positions, part: slice) -> dict:
    kwargs = {} if embeds is None else {"input_embeddings": embeds[:, part]}
    if positions is not None:
        kwargs["positions"] = positions[..., part]
    return kwargs


def whole_cold(prefill: Prefill, start: int, size: int) -> bool:
    """A chunk that is a whole prompt (of 2 or more tokens) into empty plain
    KV caches: one that can be prefilled in a batch with others."""
    return (start == 0 and size == prefill.request.num_prompt and size >= 2
            and prefill.request.vision is None  # (images: its own embeddings, alone)
            and all(type(c) is KVCache and c.keys is None for c in prefill.caches))


def batch_groups(prefills: list[Prefill], max_waste: float = 0.25) -> list[list[Prefill]]:
    """Whole cold prompts in groups of similar length: padding a group to its
    longest prompt wastes at most `max_waste` of its tokens. A group of one
    runs alone."""
    groups: list[list[Prefill]] = []
    for prefill in sorted(prefills, key=lambda p: p.request.num_prompt):
        group = groups[-1] if groups else None
        n = prefill.request.num_prompt
        if group and (len(group) + 1) * n <= (1 + max_waste) * (
                sum(p.request.num_prompt for p in group) + n):
            group.append(prefill)
        else:
            groups.append([prefill])
    return groups


def run_together(model: nn.Module, prefills: list[Prefill]) -> mx.array:
    """Prefill whole prompts in one batched forward, as mlx-lm's batch
    generator does: all but each prompt's last token right-padded through a
    batch cache (then rolled to left padding), then the last tokens as one
    step, so the vocabulary projection runs for one position per prompt.
    Each request gets its own KV back (`extract`); returns the logits (B, V),
    lazily."""
    from mlx_lm.models.cache import BatchKVCache

    prompts = [p.request.prompt_ids for p in prefills]
    lengths = [len(ids) - 1 for ids in prompts]
    longest = max(lengths)
    padding = [longest - n for n in lengths]
    cache = [BatchKVCache([0] * len(prefills)) for _ in prefills[0].caches]
    tokens = mx.array([ids[:-1] + [0] * pad for ids, pad in zip(prompts, padding)])
    if max(padding) > 0:
        for c in cache:
            c.prepare(lengths=lengths, right_padding=padding)
    model(tokens, cache=cache)
    if max(padding) > 0:
        for c in cache:
            c.finalize()
    last = mx.array([[ids[-1]] for ids in prompts])
    logits = model(last, cache=cache)[:, -1, :]
    for i, prefill in enumerate(prefills):
        prefill.caches = [c.extract(i) for c in cache]
    return logits
