"""Which matmul a CPU lane's quantized layers run (issue 51): Tandem's kernels
on the quantized weights (engine/runtime/qmm.py), MLX's own op on them, or a
float32 copy of the weights. Chosen once per model load, by measurement on
the model's own largest layer, never by assumption:

- where Tandem's kernels are built and take the layer's format, the faster
  of them and MLX's op (a future MLX whose own CPU kernel wins is then used);
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

WORDS = {"tandem": "Tandem's kernels", "mlx": "MLX's op", "float32": "a float32 copy"}
FLOAT32_MARGIN = 0.9  # a float32 copy must decode this much faster than MLX's op


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
    layers = [m for _, m in model.named_modules() if isinstance(m, nn.QuantizedLinear)]
    return max(layers, key=lambda m: m.weight.size) if layers else None


def _timed(fn, reps: int, budget_s: float = 0.25) -> float:
    """The best of `reps` calls after a warm-up; fewer (two at least) once
    they have taken `budget_s` (a slow path need not be timed closely)."""
    mx.eval(fn())  # warm-up
    best, spent = float("inf"), 0.0
    for i in range(reps):
        started = time.perf_counter()
        mx.eval(fn())
        took = time.perf_counter() - started
        best, spent = min(best, took), spent + took
        if i >= 1 and spent > budget_s:
            break
    return best * 1000


def _timings(layer, paths: tuple[str, ...], reps: int) -> dict[str, float]:
    ext = qmm.kernels()
    w, scales, biases = layer.weight, layer.scales, layer.biases
    args = dict(group_size=layer.group_size, bits=layer.bits)
    with mx.stream(mx.cpu):
        K = w.shape[1] * 32 // layer.bits
        x = mx.random.normal((1, K), key=mx.random.key(0)).astype(scales.dtype)
        mx.eval(x)
        ms = {}
        if "tandem" in paths:
            ms["tandem"] = _timed(lambda: ext.quantized_matmul(
                x, w, scales, biases, layer.group_size, layer.bits), reps)
        ms["mlx"] = _timed(lambda: mx.quantized_matmul(x, w, scales, biases, transpose=True,
                                                      mode=layer.mode, **args), reps)
        if "float32" in paths:
            dense = mx.dequantize(w, scales, biases, mode=layer.mode, **args).astype(mx.float32)
            x32 = x.astype(mx.float32)
            mx.eval(dense, x32)
            ms["float32"] = _timed(lambda: x32 @ dense.T, reps)
    return ms


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
        path = min(ms, key=ms.get)
        why = (f"{WORDS[path]} on the quantized weights, measured faster at load "
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
