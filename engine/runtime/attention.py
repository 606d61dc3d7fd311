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
fused kernels, chosen per call. Which path a process runs is measured
once, at the first install (`choice`: both timed, interleaved, on a mid-size
case; the kernel unless MLX's path is MLX_MARGIN faster: on a Mac MLX's
sgemms run on Accelerate); TANDEM_CPU_ATTENTION=tandem|mlx forces one
(benchmarks, bisecting).
"""

from __future__ import annotations

import os
import threading

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import base

from . import qmm
from .model_files import rebind

MAX_QUERIES = 16  # a row's queries from which MLX's sgemms are the better path (prefill)
MLX_MARGIN = 1.25  # MLX's path must be this much faster than the kernel to be chosen
_mlx_sdpa = base.scaled_dot_product_attention
_lock = threading.Lock()
_chosen: dict = {}


def forced() -> str | None:
    value = os.environ.get("TANDEM_CPU_ATTENTION", "").strip().lower()
    return value if value in ("tandem", "mlx") else None


def verdict(ms: dict[str, float]) -> tuple[str, str]:
    """("tandem" or "mlx", why) from the two paths' timings (ms a call)."""
    said = f"Tandem's kernel {ms['tandem']:.3g} ms, MLX's {ms['mlx']:.3g} ms a call"
    if ms["mlx"] * MLX_MARGIN < ms["tandem"]:
        return "mlx", f"MLX's attention ({said})"
    return "tandem", f"Tandem's attention kernel ({said})"


def _timings(reps: int = 6) -> dict[str, float]:
    """Both paths on one decode row: 8 query heads over 2 key-value heads,
    128 wide, 768 cached tokens (a slice of a longer cache, as mlx-lm's)."""
    from .cpu_matmul import _timed_together

    ext = qmm.extension()
    with mx.stream(mx.cpu):
        key = mx.random.key(3)
        q = mx.random.normal((1, 8, 1, 128), key=key)
        k = mx.random.normal((1, 2, 1024, 128), key=mx.random.split(key)[0])[:, :, :768]
        v = mx.random.normal((1, 2, 1024, 128), key=mx.random.split(key)[1])[:, :, :768]
        mx.eval(q, k, v)
        return _timed_together({
            "tandem": lambda: mx.eval(ext.attention(q, k, v, 0.088)),
            "mlx": lambda: mx.eval(mx.fast.scaled_dot_product_attention(q, k, v, scale=0.088)),
        }, reps)


def choice() -> tuple[str, str]:
    """("tandem" or "mlx", why): what CPU lanes' attention runs in this
    process, measured once (tens of ms) unless forced."""
    path = forced()
    if qmm.extension() is None:
        return "mlx", f"MLX's attention (the kernels are not used: {qmm.status()[1]})"
    if path is not None:
        return path, f"{'Tandem' if path == 'tandem' else 'MLX'}'s attention (forced)"
    with _lock:
        if "path" not in _chosen:
            _chosen["path"], _chosen["why"] = verdict(_timings())
        return _chosen["path"], _chosen["why"]


def cpu_attention() -> str:
    """What CPU lanes' attention runs, in words (the self-test says it)."""
    return choice()[1]


def enabled() -> bool:
    """CPU lanes' attention runs the kernel: built, trusted, chosen (called
    per attention call: the measured choice is read, not taken again)."""
    path = forced()
    if path == "mlx" or qmm.extension() is None:
        return False
    if path == "tandem":
        return True
    if "path" in _chosen:
        return _chosen["path"] == "tandem"
    return choice()[0] == "tandem"


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
    return rebind(model, "scaled_dot_product_attention", _mlx_sdpa, scaled_dot_product_attention)
