"""The cache kinds mlx-lm's models create, and what Tandem can do with each.

Batching, moving a request between lanes and casting its state go through
mlx-lm's own cache classes (`merge`, `extend`, `extract`, `filter`), so every
kind mlx-lm can batch is served:
- `KVCache`: plain attention; batched as `BatchKVCache`;
- `RotatingKVCache`: sliding-window attention (Gemma 3, gpt-oss); batched as
  `BatchRotatingKVCache`;
- `ArraysCache` (and `MambaCache`): recurrent state (Mamba, hybrid models);
  batches itself;
- `CacheList`: several of the above in one layer.
The prefix cache cuts KV into token blocks, which is only valid for plain
`KVCache` layers: a sliding window keeps only its last tokens and a recurrent
state has no per-token parts, so for any other kind the prefix cache is off
for that model (never wrong tokens), and the engine says why.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.models.cache import ArraysCache, CacheList, KVCache, RotatingKVCache, make_prompt_cache

from ..core.errors import EngineError

KIND_NAMES = {"kv": "KVCache", "rotating": "RotatingKVCache (sliding window)",
              "arrays": "ArraysCache (recurrent state)", "list": "CacheList"}


def layer_kind(cache) -> str | None:
    """'kv', 'rotating', 'arrays' or 'list'; None for a kind Tandem cannot batch."""
    if type(cache) is KVCache:
        return "kv"
    if type(cache) is RotatingKVCache:
        return "rotating"
    if isinstance(cache, ArraysCache):
        return "arrays"
    if type(cache) is CacheList:
        return "list" if all(layer_kind(c) for c in cache.caches) else None
    return None


@dataclass(frozen=True, slots=True)
class CacheProfile:
    kinds: tuple[str, ...]  # one per layer
    prefix_off_reason: str | None  # why the prefix cache cannot serve this model

    @property
    def prefix_reusable(self) -> bool:
        return self.prefix_off_reason is None


def cache_profile(model, model_type: str = "model") -> CacheProfile:
    """The model's layer cache kinds; a kind Tandem cannot serve is an
    `EngineError` that names the model type and the kind."""
    caches = make_prompt_cache(model)
    kinds = []
    for cache in caches:
        kind = layer_kind(cache)
        if kind is None:
            raise EngineError(
                f"Tandem cannot serve model type '{model_type}': its layers use "
                f"{type(cache).__name__}, which mlx-lm cannot batch, so continuous batching "
                "and moving requests between devices would be wrong.", "unsupported-model")
        kinds.append(kind)
    others = sorted({k for k in kinds if k != "kv"})
    reason = None
    if others:
        names = ", ".join(KIND_NAMES[k] for k in others)
        reason = (f"prefix cache off for '{model_type}': its {names} layers cannot be cut into "
                  "token blocks (a sliding window keeps only its last tokens; a recurrent "
                  "state has no per-token parts)")
    return CacheProfile(tuple(kinds), reason)


def arrays_of(caches) -> list[mx.array]:
    """Every array a request's caches hold (to evaluate them before a hand-off)."""
    return [a for c in caches for _, a in tree_flatten(c.state) if isinstance(a, mx.array)]


def first_attention(caches):
    """The first layer cache with keys and values (None for a purely recurrent model)."""
    for cache in caches:
        if isinstance(cache, CacheList):
            found = first_attention(cache.caches)
            if found is not None:
                return found
        elif getattr(cache, "keys", None) is not None:
            return cache
    return None


def attention_layers(caches) -> int:
    """How many layer caches hold keys and values."""
    count = 0
    for cache in caches:
        if isinstance(cache, CacheList):
            count += attention_layers(cache.caches)
        elif hasattr(cache, "keys"):
            count += 1
    return count


def cast(caches, dtype: mx.Dtype) -> None:
    """Cast a request's KV to `dtype` in place (lanes may hold the model in
    different precisions); recurrent states are cast too."""
    for cache in caches:
        if isinstance(cache, CacheList):
            cast(cache.caches, dtype)
        elif isinstance(cache, ArraysCache):
            cache.cache = [a.astype(dtype) if a is not None and a.dtype != dtype else a
                           for a in cache.cache]
        elif getattr(cache, "keys", None) is not None and cache.keys.dtype != dtype:
            cache.keys, cache.values = cache.keys.astype(dtype), cache.values.astype(dtype)
