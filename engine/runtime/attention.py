"""Tandem's few-query attention on MLX's CPU stream (issue 51): decode and
verify steps of a CPU lane, from native/tandem_kernels (src/attention.h).

MLX's CPU path for `mx.fast.scaled_dot_product_attention` builds eight ops
(two sgemms that pack their operands each call, a softmax on scalar exp):
20 us a layer at 16 cached tokens, 640 us at 2,048 here, most of a long
chat's decode step. The kernel reads each cached key and value row once per
query head, in float32 whatever the cache's dtype, 4-6x faster
(benchmarks/RESULTS.md). mlx-lm's model files call
`mlx_lm.models.base.scaled_dot_product_attention`, imported by name:
`install(model)` rebinds that name in the modules that define the model's
classes to `scaled_dot_product_attention` below, which takes the kernel
only where it applies (a CPU stream, at most MAX_QUERIES queries a row, no
attention sinks, a plain float KV cache, a mask it reads) and otherwise
calls mlx-lm's own function: a GPU lane sharing the model keeps MLX's
fused kernels, chosen per call. TANDEM_CPU_ATTENTION=mlx keeps MLX's
everywhere (benchmarks, bisecting).
"""

from __future__ import annotations

import os
import sys

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import base

from . import qmm

MAX_QUERIES = 16  # a row's queries from which MLX's sgemms are the better path (prefill)
_mlx_sdpa = base.scaled_dot_product_attention


def enabled() -> bool:
    """The kernel is built, trusted, and not turned off."""
    if os.environ.get("TANDEM_CPU_ATTENTION", "").strip().lower() == "mlx":
        return False
    return qmm.extension() is not None


def _reads(mask, queries: mx.array, keys: mx.array) -> bool:
    """None, "causal", or an array that broadcasts to (B, Hq, L, N)."""
    if mask is None or (isinstance(mask, str) and mask == "causal"):
        return True
    if not isinstance(mask, mx.array) or mask.ndim > 4:
        return False
    want = (queries.shape[0], queries.shape[1], queries.shape[2], keys.shape[2])
    return all(m in (1, w) for m, w in zip(reversed(mask.shape), reversed(want)))


def scaled_dot_product_attention(queries, keys, values, cache, scale: float, mask,
                                 sinks=None) -> mx.array:
    """mlx-lm's function, on Tandem's kernel where that applies."""
    if (sinks is None and not hasattr(cache, "bits") and queries.ndim == 4 and keys.ndim == 4
            and queries.shape[2] <= MAX_QUERIES and mx.default_device() == mx.cpu
            and _reads(mask, queries, keys) and enabled()):
        ext = qmm.extension()
        if isinstance(mask, str):
            return ext.attention(queries, keys, values, float(scale), causal=True)
        return ext.attention(queries, keys, values, float(scale), mask=mask)
    return _mlx_sdpa(queries, keys, values, cache=cache, scale=scale, mask=mask, sinks=sinks)


def install(model: nn.Module) -> int:
    """Route `model`'s attention through `scaled_dot_product_attention`; how
    many model files now do (0 where the kernel is not used, or the model's
    files compute attention another way)."""
    if not enabled():
        return 0
    count = 0
    for name in {type(m).__module__ for _, m in model.named_modules()}:
        module = sys.modules.get(name)
        found = getattr(module, "scaled_dot_product_attention", None)
        if found is _mlx_sdpa:
            module.scaled_dot_product_attention = scaled_dot_product_attention
        if found in (_mlx_sdpa, scaled_dot_product_attention):
            count += 1
    return count
