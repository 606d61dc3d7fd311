"""Tandem's SwiGLU on MLX's CPU stream (issue 51): silu(gate) * x, the MLP
activation of most models mlx-lm runs (77 of its model files call
`mlx_lm.models.activations.swiglu`, imported by name).

MLX's CPU build computes it on a scalar exp with a libm call per element,
~14 ns an element here: 16 streams of the bundled model spent a sixth of
each decode step there. native/tandem_kernels (src/elementwise.h) runs it
vectorized, 19x faster a call (benchmarks/RESULTS.md). `install(model)`
rebinds the name in the modules that define the model's classes, as
attention.py does; the kernel runs only on a CPU stream, with inputs of one
shape and float dtype, else mlx-lm's own function (a GPU lane sharing the
model keeps MLX's compiled kernel, chosen per call). TANDEM_CPU_SWIGLU=mlx
keeps MLX's everywhere (benchmarks, bisecting).
"""

from __future__ import annotations

import os

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import activations

from . import qmm
from .model_files import rebind

_mlx_swiglu = activations.swiglu
FLOATS = (mx.float32, mx.float16, mx.bfloat16)


def enabled() -> bool:
    return (os.environ.get("TANDEM_CPU_SWIGLU", "").strip().lower() != "mlx"
            and qmm.extension() is not None)


def swiglu(gate: mx.array, x: mx.array) -> mx.array:
    """mlx-lm's function, on Tandem's kernel where that applies."""
    if (mx.default_device() == mx.cpu and gate.shape == x.shape and gate.dtype == x.dtype
            and gate.dtype in FLOATS):
        ext = qmm.extension()
        if ext is not None:
            return ext.swiglu(gate, x)
    return _mlx_swiglu(gate, x)


def install(model: nn.Module) -> int:
    """Route `model`'s SwiGLU through `swiglu`; how many model files now do
    (0 where the kernels are not used or the model computes it another way)."""
    if not enabled():
        return 0
    return rebind(model, "swiglu", _mlx_swiglu, swiglu)
