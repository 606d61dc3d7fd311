"""Tandem's SwiGLU kernel (native/tandem_kernels src/elementwise.h,
engine/runtime/swiglu.py; issue 51) against a float64 reference on every
dtype and instruction set, hostile values, the pool's chunks; a model's MLP
routed through it answers as MLX's own; off where asked."""

from __future__ import annotations

import numpy as np
import pytest

import mlx.core as mx
import mlx.nn as nn

from engine.runtime import qmm, swiglu
from tests.test_qmm_kernels import EXT

pytestmark = pytest.mark.skipif(EXT is None, reason=f"kernels not built: {qmm.status()[1]}")
# The output's relative bound (float32: a few roundings of exp, the divide and
# two products; float16 and bfloat16: the output's own rounding on top) and its
# absolute floor (float16's subnormal step).
DTYPES = {mx.float32: (2.0 ** -21, 1e-30), mx.float16: (2.0 ** -10, 2.0 ** -24),
          mx.bfloat16: (2.0 ** -7, 1e-30)}
X86 = ("generic", "avx2")  # the kernel's two paths (avx512vnni runs the avx2 one)


@pytest.fixture(autouse=True)
def _restore_isa():
    if EXT is None:
        yield
        return
    isa = EXT.isa()
    yield
    EXT.force_isa(isa)


def reference(g: mx.array, x: mx.array) -> np.ndarray:
    g64 = np.array(g.astype(mx.float32), dtype=np.float64)
    x64 = np.array(x.astype(mx.float32), dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return g64 / (1.0 + np.exp(-g64)) * x64


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 1, 45), (16, 1, 8960)])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_within_the_output_dtypes_rounding_on_every_isa(shape, dtype):
    """(16, 1, 8960) runs over the pool in chunks; 7 and 45 end in a tail."""
    rng = np.random.default_rng(len(shape))
    g = mx.array(rng.standard_normal(shape).astype(np.float32) * 6).astype(dtype)
    x = mx.array(rng.standard_normal(shape).astype(np.float32)).astype(dtype)
    want = reference(g, x)
    for isa in [i for i in EXT.isas() if i in X86 or i == "neon"]:
        EXT.force_isa(isa)
        with mx.stream(mx.cpu):
            y = EXT.swiglu(g, x)
        assert y.dtype == dtype and y.shape == shape
        got = np.array(y.astype(mx.float32), dtype=np.float64)
        relative, floor = DTYPES[dtype]
        bound = np.abs(want) * relative * 1.01 + floor
        assert (np.abs(got - want) <= bound).all(), (isa, dtype, np.max(np.abs(got - want) - bound))


def test_hostile_values():
    """NaN stays NaN, silu(+inf) is +inf and silu(-inf) NaN (as MLX's),
    large magnitudes neither overflow nor lose the sign."""
    g = mx.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 100.0, -100.0, 88.0, -88.0, 1e-30] * 2)
    x = mx.ones(g.shape)
    for isa in [i for i in EXT.isas() if i in X86 or i == "neon"]:
        EXT.force_isa(isa)
        with mx.stream(mx.cpu):
            y = np.array(EXT.swiglu(g, x))
        assert np.isnan(y[[0, 2, 10, 12]]).all() and (y[[1, 11]] == np.inf).all(), isa
        np.testing.assert_allclose(y[[5, 7, 9]], [100.0, 88.0, 5e-31], rtol=1e-6)
        assert (y[[3, 4]] == 0).all() and -1e-30 <= y[6] <= 0 and -1e-30 <= y[8] <= 0, isa


def test_refuses_what_it_does_not_take():
    g = mx.ones((4,))
    for args, said in (((g, mx.ones((5,))), "same shape"), ((g, mx.ones((4,), mx.float16)),
                                                           "same dtype"),
                       ((mx.ones((4,), mx.int32), mx.ones((4,), mx.int32)), "float dtype")):
        with pytest.raises(ValueError, match=said):
            EXT.swiglu(*args, stream=mx.cpu)


def test_a_models_mlp_runs_the_kernel_and_answers_alike(tiny_model_dir, monkeypatch):
    """The tiny llama's MLP through the kernel on a CPU stream: routed (its
    module's name rebound), logits within float rounding of MLX's, the same
    greedy tokens; a call off the CPU, or with other shapes, keeps MLX's;
    TANDEM_CPU_SWIGLU=mlx installs nothing."""
    from mlx_lm.models import activations

    from engine.models.loader import load_model

    model = load_model(str(tiny_model_dir)).model
    tokens = mx.array([[1, 5, 9, 2, 7, 3]])
    module = __import__(type(model).__module__, fromlist=["swiglu"])
    monkeypatch.setattr(module, "swiglu", activations.swiglu)  # as loaded, whatever ran before
    with mx.stream(mx.cpu):
        before = model(tokens)
        monkeypatch.setenv("TANDEM_CPU_SWIGLU", "mlx")
        assert swiglu.install(model) == 0 and module.swiglu is activations.swiglu
        monkeypatch.delenv("TANDEM_CPU_SWIGLU")
        assert swiglu.install(model) == 1 and module.swiglu is swiglu.swiglu
        calls = []
        real = EXT.swiglu
        monkeypatch.setattr(EXT, "swiglu", lambda *a, **k: calls.append(1) or real(*a, **k))
        after = model(tokens)
    assert len(calls) == len(model.model.layers)
    scale = mx.abs(before).max().item()
    assert mx.abs(after - before).max().item() < 1e-4 * scale
    assert mx.array_equal(after.argmax(-1), before.argmax(-1)).item()
    g, x = mx.ones((2, 3)), mx.ones((1, 3))  # broadcast: MLX's own function
    with mx.stream(mx.cpu):
        np.testing.assert_allclose(np.array(swiglu.swiglu(g, x)), np.array(nn.silu(g) * x))
    assert len(calls) == len(model.model.layers)
