"""Which matmul a CPU lane's quantized layers run (issue 51): Tandem's kernels
on the quantized weights (engine/runtime/qmm.py), MLX's own op on them, or a
float32 copy of the weights. Chosen once per model load, by measurement on
the model's own largest layer, never by assumption:

- where Tandem's kernels are built and take the layer's format, them, unless
  MLX's op is 25% faster (a future MLX whose own CPU kernel wins is then used);
  a float32 copy is never weighed: it costs 4 bytes a parameter (a 7-8B
  model's does not fit 16-32 GB), so the lane keeps the quantized weights;
- where they are not (no compiler at install, another MLX, a format they
  do not take), a float32 copy where it decodes 10% faster than MLX's op
  (MLX's x86 kernel is scalar; its NEON one is not) and the memory plan has
  room for it, else MLX's op;
- TANDEM_CPU_MATMUL=tandem|mlx|float32 forces one (benchmarks, bisecting).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn

from . import qmm
from .qmm_packed import PackedLinear

WORDS = {"tandem": "Tandem's kernels", "mlx": "MLX's op", "float32": "a float32 copy"}
FLOAT32_MARGIN = 0.9  # a float32 copy must decode this much faster than MLX's op
MLX_MARGIN = 1.25  # MLX's op must be this much faster than the kernels to be chosen


@dataclass(frozen=True, slots=True)
class CpuMatmul:
    """The choice: `path` ("tandem", "mlx" or "float32") and why, in words;
    `ms`: a decode row's product through the largest layer, per path timed."""

    path: str
    why: str
    ms: dict[str, float] = field(default_factory=dict)


def _largest(model: nn.Module):
    """The largest projection (not a tied embedding head: MLX's x86 kernel
    takes a second a row on a 49k-token vocabulary, and the choice is the
    same on any layer of the format)."""
    layers = [m for _, m in model.named_modules() if isinstance(m, nn.QuantizedLinear)
              and not isinstance(m, PackedLinear)]  # MLX's op cannot read the packed layout
    return max(layers, key=lambda m: m.weight.size) if layers else None


def _sample(fn, calls: int) -> float:
    """Seconds a call, over `calls` calls in a row."""
    started = time.perf_counter()
    for _ in range(calls):
        mx.eval(fn())
    return (time.perf_counter() - started) / calls


def _timed_together(fns: dict, reps: int, sample_s: float = 0.002,
                    budget_s: float = 0.25) -> dict[str, float]:
    """Each path's best sample (ms a call), the paths interleaved rep by rep,
    so that a moment the machine is busy falls on all of them, and each
    sample `sample_s` long at least (a 0.05 ms call timed alone measures a
    preemption: one made the kernels lose to a 20x slower op once). A slow
    path gets fewer reps (two at least) once it has taken `budget_s`."""
    calls, best, spent = {}, {}, {}
    for name, fn in fns.items():
        first = _sample(fn, 1)  # warm-up, and the call's rough length
        calls[name] = max(1, min(1000, int(sample_s / max(first, 1e-6))))
        best[name], spent[name] = float("inf"), 0.0
    for i in range(reps):
        for name, fn in fns.items():
            if i >= 2 and spent[name] > budget_s:
                continue
            took = _sample(fn, calls[name])
            best[name] = min(best[name], took)
            spent[name] += took * calls[name]
    return {name: t * 1000 for name, t in best.items()}


def _timings(layer, paths: tuple[str, ...], reps: int) -> dict[str, float]:
    ext = qmm.kernels()
    w, scales, biases = layer.weight, layer.scales, layer.biases
    args = dict(group_size=layer.group_size, bits=layer.bits)
    with mx.stream(mx.cpu):
        K = w.shape[1] * 32 // layer.bits
        x = mx.random.normal((1, K), key=mx.random.key(0)).astype(scales.dtype)
        mx.eval(x)
        fns = {}
        if "tandem" in paths:
            fns["tandem"] = lambda: ext.quantized_matmul(x, w, scales, biases,
                                                         layer.group_size, layer.bits)
        fns["mlx"] = lambda: mx.quantized_matmul(x, w, scales, biases, transpose=True,
                                                 mode=layer.mode, **args)
        if "float32" in paths:
            dense = mx.dequantize(w, scales, biases, mode=layer.mode, **args).astype(mx.float32)
            x32 = x.astype(mx.float32)
            mx.eval(dense, x32)
            fns["float32"] = lambda: x32 @ dense.T
        return _timed_together(fns, reps)


def _measured(ms: dict[str, float]) -> str:
    return ", ".join(f"{WORDS[p]} {t:.3g} ms" for p, t in ms.items())


def choose(model: nn.Module, reps: int = 6) -> CpuMatmul | None:
    """The CPU lane's matmul for `model`; None where nothing is quantized.
    Well under a second: a few one-row products through one layer."""
    layer = _largest(model)
    if layer is None:
        return None
    forced = qmm.forced()
    if forced is not None:
        return CpuMatmul(forced, f"{WORDS[forced]} (forced: TANDEM_CPU_MATMUL={forced})")
    fits = qmm.fits(layer.bits, layer.group_size, getattr(layer, "mode", "affine"))
    if qmm.kernels() is not None and fits and layer.biases is not None:
        ms = _timings(layer, ("tandem", "mlx"), reps)
        # MLX's op only where it is clearly faster: a tie keeps the kernels
        # (the same quantized weights either way; a future MLX wins outright).
        path = "mlx" if ms["mlx"] * MLX_MARGIN < ms["tandem"] else "tandem"
        why = (f"{WORDS[path]} on the quantized weights, chosen by timing at load "
               f"(a decode row of the largest layer: {_measured(ms)})")
        return CpuMatmul(path, why, ms)
    not_used = (qmm.status()[1] if qmm.kernels() is None else
                f"they do not take {layer.bits}-bit groups of {layer.group_size}")
    if getattr(layer, "mode", "affine") != "affine":
        return CpuMatmul("mlx", f"MLX's op ({layer.mode} weights; Tandem's kernels: {not_used})")
    ms = _timings(layer, ("mlx", "float32"), reps)
    path = "float32" if ms["float32"] < ms["mlx"] * FLOAT32_MARGIN else "mlx"
    why = (f"{WORDS[path]}, measured at load ({_measured(ms)}); "
           f"Tandem's kernels are not used: {not_used}")
    return CpuMatmul(path, why, ms)
