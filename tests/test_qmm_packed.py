"""The kernels on the packed layout (engine/runtime/qmm_packed.py,
native/tandem_kernels/src/packed_impl.h; issue 51): 8 columns' words
interleaved, the CPU lane's own arrays where no GPU lane shares them.

Each product is held to the same bound as MLX's layout (tests/test_qmm_kernels.py
`reference`: int16 activations' rounding plus float rounding) against a float64
reference of the unpacked weights, on every instruction set this CPU runs
(generic: the scalar kernel any build has), both paths (integer kernels,
dequantized panels + sgemm), column counts that are not multiples of 8; the
packed layer answers as the unpacked one, as a layer, as a tied embedding's
lookup and head, and as a whole model; a packed layer refuses a GPU stream
and malformed arrays with a message."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mlx.core as mx
import mlx.nn as nn

from engine.runtime import qmm, qmm_packed
from tests.test_qmm_kernels import EPS, EXT, reference, weights

pytestmark = pytest.mark.skipif(EXT is None, reason=f"kernels not built: {qmm.status()[1]}")
INT16 = [isa for isa in (EXT.isas() if EXT is not None else []) if isa != "avx512vnni-int8"]
INT8 = [isa for isa in (EXT.isas() if EXT is not None else []) if isa == "avx512vnni-int8"]


@pytest.fixture(autouse=True)
def _restore_settings():
    if EXT is None:
        yield
        return
    isa, rows = EXT.isa(), EXT.sgemm_rows(packed=True)
    yield
    EXT.force_isa(isa)
    EXT.set_sgemm_rows(rows, packed=True)


def packed_check(x, w, s, b, group, bits, dtype_name, isa):
    """The packed product within the MLX layout's bound (int8 activations':
    s = amax / 127 where avx512vnni-int8 is forced); the output."""
    n = w.shape[0]
    pw, ps, pb = qmm_packed.pack_arrays(w, s, b)
    EXT.force_isa(isa)
    with mx.stream(mx.cpu):
        y = EXT.quantized_matmul_packed(x, pw, ps, pb, n, group, bits)
    assert y.dtype == x.dtype and y.shape == (*x.shape[:-1], n)
    got = np.array(y.astype(mx.float32), dtype=np.float64).reshape(-1, n)
    ref, rounding, size = reference(x, w, s, b, group, bits, 127.0 if isa in INT8 else 32767.0)
    bound = rounding * 1.001 + size * 1e-5 + np.abs(ref) * EPS[dtype_name] + 1e-6
    worst = np.max(np.abs(got - ref) - bound)
    assert worst <= 0, (isa, bits, group, dtype_name, x.shape, n, worst)
    return got


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group", [32, 64, 128])
@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
def test_every_format_row_count_and_isa_within_the_bound(bits, group, dtype_name):
    rng = np.random.default_rng(bits * 100 + group)
    dtype = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}[dtype_name]
    for M, N, K in ((1, 67, 4 * group), (2, 8, group), (3, 1, 2 * group), (5, 64, 4 * group),
                    (16, 33, 2 * group), (33, 9, group), (300, 5, group)):
        w, s, b = weights(rng, N, K, group, bits, dtype)
        x = mx.array(rng.standard_normal((M, K)).astype(np.float32) * 3).astype(dtype)
        outs = [packed_check(x, w, s, b, group, bits, dtype_name, isa) for isa in INT16]
        tol = max(1e-4, 2 * EPS[dtype_name])  # the same integers; an output's last bit
        for other in outs[1:]:
            np.testing.assert_allclose(other, outs[0], rtol=tol, atol=tol)
        for isa in INT8:  # int8 activations (AVX-512 VNNI, where asked for)
            packed_check(x, w, s, b, group, bits, dtype_name, isa)


@pytest.mark.parametrize("bits", [4, 8])
def test_the_sgemm_path_and_hostile_rows(bits):
    """By default packed weights never take the sgemm path (the integer
    kernels measured faster at every row count); forced, dequantized packed
    panels + sgemm (K = 8192: three panels, the last short, and a last
    column group of 3) are within float32's error; a NaN or
    inf in a row makes that row's outputs NaN on the integer path, the other
    rows untouched."""
    rng = np.random.default_rng(bits)
    w, s, b = weights(rng, 299, 8192, 32, bits, mx.float16)
    x = mx.array(rng.standard_normal((30, 8192)).astype(np.float32))
    ref, _, _ = reference(x, w, s, b, 32, bits)
    pw, ps, pb = qmm_packed.pack_arrays(w, s, b)
    assert EXT.sgemm_rows(packed=True) > 10 ** 6 and EXT.sgemm_rows() < 100
    EXT.set_sgemm_rows(1, packed=True)
    for isa in INT16:
        EXT.force_isa(isa)
        with mx.stream(mx.cpu):
            y = np.array(EXT.quantized_matmul_packed(x, pw, ps, pb, 299, 32, bits))
        assert (np.abs(y - ref) <= np.abs(ref) * 2 ** -7 + 1e-3).all(), isa
    EXT.set_sgemm_rows(10 ** 9, packed=True)
    bad = np.array(x[:4])
    bad[1, 77], bad[3, 8000] = np.nan, np.inf
    for isa in INT16 + INT8:
        EXT.force_isa(isa)
        with mx.stream(mx.cpu):
            y = np.array(EXT.quantized_matmul_packed(mx.array(bad), pw, ps, pb, 299, 32, bits))
        assert np.isnan(y[[1, 3]]).all() and np.isfinite(y[[0, 2]]).all(), isa
        if isa in INT16:
            np.testing.assert_allclose(y[[0, 2]], ref[[0, 2]], rtol=1e-2, atol=5e-2)


@settings(max_examples=20, deadline=None)
@given(M=st.integers(1, 40), N=st.integers(1, 41), blocks=st.integers(1, 6),
       bits=st.sampled_from([4, 8]), group=st.sampled_from([32, 64, 128]),
       seed=st.integers(0, 2 ** 16))
def test_any_shape(M, N, blocks, bits, group, seed):
    rng = np.random.default_rng(seed)
    K = group * blocks
    w, s, b = weights(rng, N, K, group, bits, mx.float16)
    x = mx.array(rng.standard_normal((M, K)).astype(np.float32)).astype(mx.float16)
    for isa in INT16 + INT8:
        packed_check(x, w, s, b, group, bits, "float16", isa)


def test_packed_layers_answer_as_the_unpacked_ones():
    """A QuantizedLinear (with a bias) and a tied QuantizedEmbedding packed in
    place: the same outputs as MLX's layout, the lookup exact, the arrays the
    same bytes but for the padding to 8 columns."""
    mx.random.seed(0)
    lin = nn.QuantizedLinear.from_linear(nn.Linear(128, 21, bias=True), group_size=64, bits=4)
    emb = nn.QuantizedEmbedding.from_embedding(nn.Embedding(37, 64), group_size=32, bits=8)
    x = mx.random.normal((3, 128))
    ids = mx.array([[0, 36, 8, 7, 15, 16]])
    h = mx.random.normal((2, 64))
    with mx.stream(mx.cpu):
        before = (lin(x), emb(ids), emb.as_linear(h))
        sizes = (lin["weight"].nbytes, emb["weight"].nbytes)
        qmm_packed.pack(lin, EXT)
        qmm_packed.pack(emb, EXT)
        after = (lin(x), emb(ids), emb.as_linear(h))
    assert type(lin) is qmm_packed.PackedLinear and type(emb) is qmm_packed.PackedEmbedding
    assert lin["weight"].shape == (3, 16, 8) and lin.columns == 21
    assert lin["weight"].nbytes == sizes[0] * 24 // 21 and emb["weight"].nbytes == sizes[1] * 40 // 37
    assert "output_dims=21" in repr(lin) and "packed" in repr(emb)
    assert mx.array_equal(after[1], before[1]).item()  # the lookup: the same dequantized rows
    for got, want in ((after[0], before[0]), (after[2], before[2])):
        scale = mx.abs(want).max().item()
        assert mx.abs(got - want).max().item() < 1e-3 * scale


def test_a_packed_model_answers_as_mlxs_layout(tiny_model_dir):
    """The tiny model's every quantized layer packed: the same greedy tokens
    and logits within the kernels' rounding, as install() without packing."""
    from engine.models.loader import load_model

    tokens = mx.array([[1, 5, 9, 2, 7, 3]])
    outs = {}
    for pack in (False, True):
        model = load_model(str(tiny_model_dir)).model
        nn.quantize(model, group_size=32, bits=4)
        with mx.stream(mx.cpu):
            routed = qmm.install(model, pack=pack)
            outs[pack] = model(tokens)
        kinds = {type(m).__name__ for _, m in model.named_modules()}
        assert routed > 0
        assert ("PackedLinear" in kinds) == (pack and EXT.isa() in ("avx2", "avx512vnni"))
    scale = mx.abs(outs[False]).max().item()
    assert mx.abs(outs[True] - outs[False]).max().item() < 1e-3 * scale
    assert mx.array_equal(outs[True].argmax(-1), outs[False].argmax(-1)).item()


def test_packed_arrays_are_checked_and_never_run_on_a_gpu_stream():
    rng = np.random.default_rng(1)
    w, s, b = weights(rng, 20, 128, 32, 4, mx.float16)
    pw, ps, pb = qmm_packed.pack_arrays(w, s, b)
    x = mx.ones((1, 128))
    cases = [((x, w, s, b, 20, 32, 4), "3-D uint32"),
             ((x, pw, ps, pb, 25, 32, 4), "groups of 8 columns, not 25"),
             ((x, pw, ps, pb, 20, 32, 8), "values a column"),
             ((x, pw, ps[:, :2], pb, 20, 32, 4), "packed scales"),
             ((x, pw, ps, pb.astype(mx.float32), 20, 32, 4), "biases must have")]
    for args, said in cases:
        with pytest.raises(ValueError, match=said):
            EXT.quantized_matmul_packed(*args, stream=mx.cpu)
    if mx.metal.is_available() or mx.cuda.is_available():
        with pytest.raises(ValueError, match="CPU stream only"):
            EXT.quantized_matmul_packed(x, pw, ps, pb, 20, 32, 4, stream=mx.gpu)


def test_a_packed_model_is_never_converted_as_if_it_were_mlxs_layout(tiny_model_dir):
    """A later conversion to float (a plan that wants a float32 copy) refuses
    packed weights by name instead of dequantizing that layout as MLX's."""
    from engine.models.loader import load_model, with_weight_format

    loaded = load_model(str(tiny_model_dir))
    nn.quantize(loaded.model, group_size=32, bits=4)
    loaded.weight_format = "quantized"
    if not qmm.install(loaded.model, pack=True) or EXT.isa() not in qmm_packed.PACKED_ISAS:
        pytest.skip("this CPU's kernels do not pack")
    with pytest.raises(RuntimeError, match="packed for a CPU lane"):
        with_weight_format(loaded, "float32")
