"""Tandem's quantized matmul kernels (native/tandem_kernels, engine/runtime/qmm.py;
issue 51) against a float64 reference of the dequantized weights: every
instruction set this CPU runs, 4 and 8 bits, groups of 32, 64 and 128,
float32/float16/bfloat16, 1 to 300 rows, odd column counts, hostile values;
both paths (few rows: int16 activations and integer dot products; many rows:
panels of dequantized weights and sgemm), each forced on the same inputs.

The kernels quantize activations per 32-element block, to int16 (s = amax/32767)
or, where forced (avx512vnni-int8), to int8 (s = amax/127, llama.cpp's Q8 rule),
so each output's error is bounded by what that rounding can do:
|y - ref| <= sum_k |scale[n, k] * q[n, k]| * s(block of k) / 2 (the biases
meet the exact sum of each block's activations), plus float rounding
(the accumulation, and the output's dtype). Skipped, with the reason, where
the kernels were not built (make kernels)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mlx.core as mx

from engine.runtime import qmm

try:  # the module itself, whether or not qmm's checks accept it
    from engine.runtime import _tandem_kernels as EXT
except ImportError:
    EXT = None
BUILT = qmm.STATUS_FILE.exists() and qmm.STATUS_FILE.read_text().startswith("built")
pytestmark = pytest.mark.skipif(EXT is None, reason=f"kernels not built: {qmm.status()[1]}")
DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}
EPS = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


def isas() -> list[str]:
    """Every instruction set this CPU runs (avx512vnni-int8: int8 activations)."""
    return list(EXT.isas()) if EXT is not None else []


QMAX = {"avx512vnni-int8": 127.0}  # activations' integer range; 32767 elsewhere


@pytest.fixture(autouse=True)
def _restore_settings():
    """The ISA and the sgemm threshold as they were: tests force them."""
    if EXT is None:
        yield
        return
    isa, rows = EXT.isa(), EXT.sgemm_rows()
    yield
    EXT.force_isa(isa)
    EXT.set_sgemm_rows(rows)


def unpack(w: mx.array, bits: int, K: int) -> np.ndarray:
    """MLX's packed uint32 rows as integers (low bits first)."""
    words = np.array(w).astype(np.uint64)
    per = 32 // bits
    shifts = (np.arange(per, dtype=np.uint64) * bits)
    values = (words[..., None] >> shifts) & ((1 << bits) - 1)
    return values.reshape(w.shape[0], -1)[:, :K].astype(np.float64)


def reference(x, w, scales, biases, group, bits, qmax=32767.0):
    """(float64 y, the activations' rounding bound per output, the size of its terms)."""
    K = x.shape[-1]
    q = unpack(w, bits, K)
    s = np.repeat(np.array(scales.astype(mx.float32), dtype=np.float64), group, axis=1)
    b = np.repeat(np.array(biases.astype(mx.float32), dtype=np.float64), group, axis=1)
    w_hat = s * q + b
    x64 = np.array(x.astype(mx.float32), dtype=np.float64).reshape(-1, K)
    step = np.abs(x64).reshape(len(x64), K // 32, 32).max(axis=2) / qmax
    rounding = (np.repeat(step, 32, axis=1) / 2) @ np.abs(s * q).T  # the biases meet exact x
    # What float32 sums can lose: the terms' size (a block's products are
    # exact in int32; its scaled sum and the blocks' float sums are not).
    terms = np.abs(x64) @ (np.abs(w_hat) + np.abs(s) * 2 ** bits).T
    return x64 @ w_hat.T, rounding, terms


def check(x, w, scales, biases, group, bits, dtype_name, isa):
    EXT.force_isa(isa)
    with mx.stream(mx.cpu):
        y = EXT.quantized_matmul(x, w, scales, biases, group, bits)
    assert y.dtype == x.dtype and y.shape == (*x.shape[:-1], w.shape[0])
    got = np.array(y.astype(mx.float32), dtype=np.float64).reshape(-1, w.shape[0])
    ref, rounding, size = reference(x, w, scales, biases, group, bits,
                                    QMAX.get(isa, 32767.0))
    bound = rounding * 1.001 + size * 1e-5 + np.abs(ref) * EPS[dtype_name] + 1e-6
    worst = np.max(np.abs(got - ref) - bound)
    assert worst <= 0, (isa, bits, group, dtype_name, x.shape, worst)


def weights(rng, N, K, group, bits, dtype):
    W = mx.array(rng.standard_normal((N, K)).astype(np.float32)).astype(dtype)
    return mx.quantize(W, group_size=group, bits=bits)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group", [32, 64, 128])
@pytest.mark.parametrize("dtype_name", list(DTYPES))
def test_every_format_and_row_count_within_the_rounding_bound(bits, group, dtype_name):
    rng = np.random.default_rng(bits * 1000 + group)
    dtype = DTYPES[dtype_name]
    for M, N, K in ((1, 67, 4 * group), (2, 3, group), (3, 1, 2 * group), (5, 67, 4 * group),
                    (16, 33, 2 * group), (33, 3, group), (65, 17, 2 * group),
                    (300, 5, group)):
        w, s, b = weights(rng, N, K, group, bits, dtype)
        x = mx.array(rng.standard_normal((M, K)).astype(np.float32) * 3).astype(dtype)
        for isa in isas():
            check(x, w, s, b, group, bits, dtype_name, isa)


def test_batched_rows_and_the_isas_agree():
    """(batch, sequence, K) inputs; every ISA within its bound, and those that
    quantize activations alike (int16, int8) give the same numbers within
    float rounding (the same integer products, summed in another order)."""
    rng = np.random.default_rng(3)
    w, s, b = weights(rng, 96, 256, 64, 4, mx.float16)
    x = mx.array(rng.standard_normal((2, 7, 256)).astype(np.float32)).astype(mx.float16)
    outs: dict[float, list] = {}
    for isa in isas():
        check(x, w, s, b, 64, 4, "float16", isa)
        EXT.force_isa(isa)
        with mx.stream(mx.cpu):
            y = np.array(EXT.quantized_matmul(x, w, s, b, 64, 4).astype(mx.float32))
        outs.setdefault(QMAX.get(isa, 32767.0), []).append(y)
    for alike in outs.values():
        for other in alike[1:]:
            np.testing.assert_allclose(other, alike[0], rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group", [32, 128])
def test_the_two_paths_agree_within_the_rounding_bound(bits, group):
    """The same rows through the integer kernels and through dequantized
    panels + sgemm (a panel is 4 MiB of floats: K = 8192 takes 128 columns a
    panel, so 300 columns take three, the last one short)."""
    rng = np.random.default_rng(bits + group)
    for M, N, K in ((1, 300, 8192), (9, 67, 4 * group), (40, 33, 2 * group)):
        w, s, b = weights(rng, N, K, group, bits, mx.bfloat16)
        x = mx.array(rng.standard_normal((M, K)).astype(np.float32)).astype(mx.bfloat16)
        outs = []
        for rows in (1, 10 ** 9):  # every product through sgemm; none
            EXT.set_sgemm_rows(rows)
            for isa in isas():
                check(x, w, s, b, group, bits, "bfloat16", isa)
                with mx.stream(mx.cpu):
                    outs.append(np.array(EXT.quantized_matmul(x, w, s, b, group, bits)
                                         .astype(mx.float32)))
        ref, rounding, _ = reference(x, w, s, b, group, bits)
        sgemm_error = np.abs(outs[0] - ref)
        # The float path has no activation rounding: its error is float32's.
        assert (sgemm_error <= np.abs(ref) * 2 ** -7 + 1e-3).all(), (M, N, K)


@pytest.mark.parametrize("sgemm_rows", [1, 10 ** 9])
def test_hostile_values(sgemm_rows):
    """Zero activation blocks and zero weight groups are exact; the largest
    float16 scales stay finite; a NaN or an inf in a row makes that row's
    outputs NaN (inf or NaN where sgemm multiplies it) and leaves the other
    rows alone, on either path."""
    EXT.set_sgemm_rows(sgemm_rows)
    rng = np.random.default_rng(5)
    K, N = 128, 9
    for isa in isas():
        for bits in (4, 8):
            W = rng.standard_normal((N, K)).astype(np.float32)
            W[2] = 0.0  # a row of zero weights
            w, s, b = mx.quantize(mx.array(W), group_size=32, bits=bits)
            x = rng.standard_normal((4, K)).astype(np.float32)
            x[0, :32] = 0.0  # an all-zero block
            x[1] = 0.0
            check(mx.array(x), w, s, b, 32, bits, "float32", isa)
            big = mx.full(s.shape, 65504.0, dtype=mx.float16)
            xh = mx.array(rng.uniform(-1e-5, 1e-5, (2, K)).astype(np.float32)).astype(mx.float16)
            check(xh, w, big, b.astype(mx.float16), 32, bits, "float16", isa)
            for poison in (np.nan, np.inf, -np.inf):
                bad = x.copy()
                bad[2, 70] = poison
                EXT.force_isa(isa)
                with mx.stream(mx.cpu):
                    y = np.array(EXT.quantized_matmul(mx.array(bad), w, s, b, 32, bits))
                if sgemm_rows == 1:  # a float product: inf times weights, or NaN
                    assert not np.isfinite(y[2]).any(), (isa, bits, poison)
                else:
                    assert np.isnan(y[2]).all(), (isa, bits, poison)
                clean = np.delete(bad, 2, axis=0)
                check(mx.array(clean), w, s, b, 32, bits, "float32", isa)
                assert np.isfinite(np.delete(y, 2, axis=0)).all()


@settings(max_examples=25, deadline=None)
@given(M=st.integers(1, 70), N=st.integers(1, 40), blocks=st.integers(1, 8),
       bits=st.sampled_from([4, 8]), group=st.sampled_from([32, 64, 128]),
       seed=st.integers(0, 2 ** 16))
def test_any_shape(M, N, blocks, bits, group, seed):
    rng = np.random.default_rng(seed)
    K = group * blocks
    w, s, b = weights(rng, N, K, group, bits, mx.float32)
    x = mx.array((rng.standard_normal((M, K)) * rng.uniform(0.01, 100)).astype(np.float32))
    for isa in isas():
        check(x, w, s, b, group, bits, "float32", isa)


def test_wrong_arguments_are_refused_by_name():
    rng = np.random.default_rng(9)
    w, s, b = weights(rng, 8, 128, 32, 4, mx.float32)
    x = mx.ones((2, 128))
    cases = [((mx.ones((2, 96)), w, s, b, 32, 4), "packs 128 values a row, x has 96"),
             ((x, w, s[:, :2], b, 32, 4), "scales must be"),
             ((x, w, s, b.astype(mx.float16), 32, 4), "biases must"),
             ((x, w.astype(mx.int32), s, b, 32, 4), "w must be a 2-D uint32"),
             ((x, w, s, b, 48, 4), "group_size must be"),
             ((x, w, s, b, 32, 3), "bits must be 4 or 8"),
             ((mx.ones((2, 128), dtype=mx.int32), w, s, b, 32, 4), "x must be a float")]
    for args, message in cases:
        with pytest.raises(ValueError, match=message):
            EXT.quantized_matmul(*args)
    with pytest.raises(ValueError):
        EXT.force_isa("avx512-from-the-future")


def test_the_wrapper_falls_back_to_mlx_where_the_kernels_do_not_apply(monkeypatch):
    rng = np.random.default_rng(11)
    w, s, b = weights(rng, 16, 128, 32, 4, mx.float32)
    x = mx.array(rng.standard_normal((3, 128)).astype(np.float32))
    with mx.stream(mx.cpu):
        ours = qmm.quantized_matmul(x, w, s, b, group_size=32, bits=4)
        mlx = mx.quantized_matmul(x, w, s, b, transpose=True, group_size=32, bits=4)
        assert not np.array_equal(np.array(ours), np.array(mlx))  # int16 activations: ours
        w3, s3, b3 = mx.quantize(mx.array(rng.standard_normal((16, 128)).astype(np.float32)),
                                 group_size=32, bits=3)
        three = qmm.quantized_matmul(x, w3, s3, b3, group_size=32, bits=3)
        assert np.array_equal(np.array(three), np.array(
            mx.quantized_matmul(x, w3, s3, b3, transpose=True, group_size=32, bits=3)))
    monkeypatch.setenv("TANDEM_CPU_MATMUL", "mlx")
    ext, why = qmm._load()
    assert ext is None and why == "TANDEM_CPU_MATMUL=mlx"
    assert qmm.status() == ("tandem", f"{EXT.isa()} kernels")  # this process chose already


def test_kernels_that_were_built_are_the_ones_used():
    """A build that qmm refuses (another MLX, another nanobind, a wrong
    answer on its smoke case) falls back to MLX's op at run time, and fails
    here: the suite says so instead of running slower."""
    assert not BUILT or qmm.status()[0] == "tandem", qmm.status()


@pytest.mark.parametrize("M", [4, 30])  # the integer path; sgemm (24 rows and up)
def test_threads_split_the_columns_and_change_no_bit(M):
    """Large products run on the pool (the caller and its workers, columns
    in fixed chunks; on the sgemm path the panel's dequantizing): the same
    bits on 1, 2 or 3 threads, call after call."""
    rng = np.random.default_rng(13)
    w, s, b = weights(rng, 1030, 512, 64, 4, mx.float32)  # 4 x 1030 x 512 > 2^21: the pool
    xs = [mx.array(rng.standard_normal((M, 512)).astype(np.float32)) for _ in range(3)]
    first = EXT.threads()
    try:
        outs = {}
        for n in (1, 2, 3):
            EXT.set_threads(n)
            with mx.stream(mx.cpu):
                outs[n] = [np.array(EXT.quantized_matmul(x, w, s, b, 64, 4)) for x in xs * 40]
        for n in (2, 3):
            for got, want in zip(outs[n], outs[1]):
                assert np.array_equal(got, want)
        check(xs[0], w, s, b, 64, 4, "float32", EXT.isa())
    finally:
        EXT.set_threads(first)


def test_a_model_installed_runs_its_layers_through_the_kernels(tiny_model_dir):
    """qmm.install on a real (tiny) llama quantized the way mlx-lm does:
    every fitting layer routed, logits near MLX's op on the same weights
    (int16 activations), a layer of another format (3-bit) left on MLX's op."""
    import mlx.nn as nn

    from engine.models.loader import load_model

    model = load_model(str(tiny_model_dir)).model
    nn.quantize(model, group_size=32, bits=4,
                class_predicate=lambda path, m: isinstance(m, nn.Linear) and "down_proj" not in path)
    nn.quantize(model, group_size=32, bits=3,
                class_predicate=lambda path, m: isinstance(m, nn.Linear))
    tokens = mx.array([[1, 5, 9, 30, 2, 77, 12, 4]])
    with mx.stream(mx.cpu):
        before = model(tokens)
        routed = qmm.install(model)
        after = model(tokens)
    kinds = [type(m).__name__ for _, m in model.named_modules()]
    assert routed == kinds.count("_KernelLinear") > 0 and "QuantizedLinear" in kinds  # 3-bit
    scale = mx.abs(before).max().item()
    assert mx.abs(after - before).max().item() > 0  # it ran other code
    assert mx.abs(after - before).max().item() < 0.01 * scale  # MLX's op, the same weights
    assert (after.argmax(-1) == before.argmax(-1)).all().item()


def test_a_cpu_lane_forced_to_the_kernels_keeps_the_quantized_weights(monkeypatch):
    """TANDEM_CPU_MATMUL=tandem: the bundled 4-bit model's CPU lane reads the
    quantized arrays (no float32 copy in the plan), through the kernels, and
    answers; the default (unset) is still the probe's choice."""
    from engine import Engine, LaneSpec, SamplingParams

    monkeypatch.setenv("TANDEM_CPU_MATMUL", "tandem")
    engine = Engine.load("default", lanes=[LaneSpec("cpu", "cpu")])
    try:
        lane = engine.memory_plan.lane("cpu")
        assert lane.weight_format == "quantized", lane
        kinds = {type(m).__name__ for _, m in engine.lanes["cpu"].model.named_modules()}
        # A CPU-only lane's layers take the kernels' packed layout (x86).
        routed = "PackedLinear" if EXT.isa() in ("avx2", "avx512vnni") else "_KernelLinear"
        assert routed in kinds and "QuantizedLinear" not in kinds
        done = engine.generate([{"role": "user", "content": "What is the capital of France?"}],
                               SamplingParams(max_tokens=12, temperature=0.0), timeout=120)
        assert done.output_tokens > 0 and done.reason in ("stop", "length")
        assert "Paris" in done.text
    finally:
        engine.close()


def test_int8_activations_run_only_where_asked_for():
    """The default is the int16 path, also on a CPU with AVX-512 VNNI (int8
    lost 1.7% of perplexity on the bundled model); TANDEM_CPU_ACTIVATIONS=int8
    runs the VNNI kernels where the CPU has them, and says so."""
    import os
    import subprocess
    import sys

    assert not EXT.isa().endswith("-int8") or os.environ.get("TANDEM_CPU_ACTIVATIONS") == "int8"
    code = ("import engine, mlx.core; from engine.runtime import qmm; "
            "print(qmm.activations(), '|', qmm.status()[1])")
    env = {**os.environ, "TANDEM_CPU_ACTIVATIONS": "int8"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout.strip()
    if "avx512vnni-int8" in EXT.isas():
        assert out == "int8 | avx512vnni-int8 kernels (int8 activations)"
    else:
        assert out.startswith("int8 | ") and "int8 activations" not in out
    # TANDEM_CPU_KERNELS forces any instruction set the CPU runs; others are ignored.
    for name in ("generic", "sse9000"):
        env = {**os.environ, "TANDEM_CPU_KERNELS": name, "TANDEM_CPU_ACTIVATIONS": ""}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=120, check=True).stdout.strip()
        assert out == ("int16 | generic kernels" if name == "generic"
                       else f"int16 | {EXT.isa()} kernels"), out
