"""Tandem's few-query attention on the CPU (native/tandem_kernels/src/attention.h,
engine/runtime/attention.py; issue 51) against a float64 softmax in numpy:
every instruction set this CPU runs, float32/float16/bfloat16 caches, GQA,
1-16 queries, a KV cache's slice (strided, as mlx-lm keeps it), no mask,
causal, boolean and additive masks broadcast; hostile values give NaN rows
as a float softmax does. Then the bundled model's decode steps through
`install`: the same greedy tokens as MLX's own attention. Skipped, with the
reason, where the kernels were not built (make kernels)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mlx.core as mx

from engine.runtime import attention, qmm

EXT = qmm.extension()
pytestmark = pytest.mark.skipif(EXT is None, reason=f"kernels not built: {qmm.status()[1]}")
DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}  # the output's rounding


@pytest.fixture(autouse=True)
def _restore_isa():
    isa = EXT.isa() if EXT is not None else None
    yield
    if EXT is not None:
        EXT.force_isa(isa)


def isas() -> list[str]:
    return ["generic"] + ([EXT.isa()] if EXT is not None and EXT.isa() != "generic" else [])


def reference(q, k, v, scale, causal=False, mask=None) -> np.ndarray:
    """softmax(scale * q k^T + mask) v in float64, GQA by repeating k and v."""
    q, k, v = (np.array(a.astype(mx.float32), dtype=np.float64) for a in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("bhld,bhnd->bhln", q, k) * scale
    L, N = q.shape[2], k.shape[2]
    if causal:
        s = np.where(np.arange(N)[None, :] <= N - L + np.arange(L)[:, None], s, -np.inf)
    if mask is not None:
        m = np.array(mask)
        s = np.where(m, s, -np.inf) if m.dtype == np.bool_ else s + m.astype(np.float64)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    return np.einsum("bhln,bhnd->bhld", p / p.sum(axis=-1, keepdims=True), v)


def cache_slice(rng, B, H, N, D, dtype):
    """k or v as mlx-lm's KVCache hands them over: the first N of a longer buffer."""
    buffer = mx.array(rng.standard_normal((B, H, N + 9, D)).astype(np.float32)).astype(dtype)
    return buffer[:, :, :N, :]


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 3), kv=st.integers(1, 4), rep=st.sampled_from([1, 2, 3, 4]),
       L=st.integers(1, 16), extra=st.integers(0, 300), D=st.sampled_from([16, 20, 64, 80, 128]),
       dtype=st.sampled_from(sorted(DTYPES)), kind=st.sampled_from(["none", "causal", "bool",
                                                                    "float"]),
       seed=st.integers(0, 2 ** 16))
def test_against_float64(B, kv, rep, L, extra, D, dtype, kind, seed):
    rng = np.random.default_rng(seed)
    N = L + extra
    dt = DTYPES[dtype]
    q = mx.array(rng.standard_normal((B, kv * rep, L, D)).astype(np.float32)).astype(dt)
    k, v = cache_slice(rng, B, kv, N, D, dt), cache_slice(rng, B, kv, N, D, dt)
    mask = None
    if kind == "bool":  # every row sees its last key at least
        seen = rng.random((B, 1, L, N)) > 0.4
        seen[..., -1] = True
        mask = mx.array(seen)
    elif kind == "float":
        mask = mx.array(rng.standard_normal((L, N)).astype(np.float32) * 3)
    want = reference(q, k, v, 0.2, kind == "causal", mask)
    for isa in isas():
        EXT.force_isa(isa)
        with mx.stream(mx.cpu):
            got = EXT.attention(q, k, v, 0.2, causal=kind == "causal", mask=mask)
        assert got.dtype == dt and got.shape == q.shape
        err = np.abs(np.array(got.astype(mx.float32), dtype=np.float64) - want)
        assert err.max() <= TOLERANCE[dtype] * (np.abs(want).max() + 1), (isa, err.max())


def test_hostile_values_give_nan_rows_as_a_float_softmax_does():
    rng = np.random.default_rng(3)
    q = mx.array(rng.standard_normal((1, 2, 3, 32)).astype(np.float32))
    k = rng.standard_normal((1, 1, 10, 32)).astype(np.float32)
    v = mx.array(rng.standard_normal((1, 1, 10, 32)).astype(np.float32))
    k[0, 0, 6, 7] = np.nan  # one key: every query that sees it
    nothing = mx.array(np.zeros((1, 1, 3, 10), dtype=bool))  # no key seen at all
    for isa in isas():
        EXT.force_isa(isa)
        with mx.stream(mx.cpu):
            poisoned = np.array(EXT.attention(q, mx.array(k), v, 0.1))
            blind = np.array(EXT.attention(q, mx.array(k * 0), v, 0.1, mask=nothing))
            huge = np.array(EXT.attention(q * float("inf"), mx.array(k * 0), v, 0.1))
        assert np.isnan(poisoned).all() and np.isnan(blind).all() and np.isnan(huge).all()
        # A NaN key that the causal mask hides from the first query changes nothing there.
        with mx.stream(mx.cpu):
            early = np.array(EXT.attention(q, mx.array(k[:, :, :7]), v[:, :, :7], 0.1,
                                           causal=True))
        assert np.isfinite(early[0, :, 0]).all() and np.isnan(early[0, :, 2]).all()


def test_bad_shapes_are_refused_with_a_message():
    q = mx.zeros((1, 3, 1, 16))
    with mx.stream(mx.cpu):
        with pytest.raises(ValueError, match="multiple of k's"):
            EXT.attention(q, mx.zeros((1, 2, 5, 16)), mx.zeros((1, 2, 5, 16)), 1.0)
        with pytest.raises(ValueError, match="B and D"):
            EXT.attention(q, mx.zeros((1, 1, 5, 8)), mx.zeros((1, 1, 5, 8)), 1.0)
        with pytest.raises(ValueError, match="4-D"):
            EXT.attention(q[0], mx.zeros((1, 1, 5, 16)), mx.zeros((1, 1, 5, 16)), 1.0)


def test_threads_split_the_heads_and_change_no_bit():
    rng = np.random.default_rng(5)
    q = mx.array(rng.standard_normal((2, 16, 2, 64)).astype(np.float32))
    k, v = cache_slice(rng, 2, 4, 3000, 64, mx.float16), cache_slice(rng, 2, 4, 3000, 64,
                                                                      mx.float16)
    threads = EXT.threads()
    try:
        with mx.stream(mx.cpu):
            pooled = np.array(EXT.attention(q, k, v, 0.125))
            EXT.set_threads(1)
            alone = np.array(EXT.attention(q, k, v, 0.125))
    finally:
        EXT.set_threads(threads)
    assert np.array_equal(pooled, alone)


def test_the_wrapper_keeps_mlx_where_the_kernel_does_not_apply(monkeypatch):
    """A prefill (more than MAX_QUERIES queries), attention sinks, a mask it
    cannot broadcast, TANDEM_CPU_ATTENTION=mlx: mlx-lm's own function, bit
    for bit."""
    monkeypatch.setenv("TANDEM_CPU_ATTENTION", "tandem")  # not the probe's timing
    rng = np.random.default_rng(9)
    L = attention.MAX_QUERIES + 1
    q = mx.array(rng.standard_normal((1, 4, L, 32)).astype(np.float32))
    k = mx.array(rng.standard_normal((1, 2, L, 32)).astype(np.float32))
    v = mx.array(rng.standard_normal((1, 2, L, 32)).astype(np.float32))
    with mx.stream(mx.cpu):
        ours = attention.scaled_dot_product_attention(q, k, v, None, 0.5, "causal")
        theirs = attention._mlx_sdpa(q, k, v, None, scale=0.5, mask="causal")
        assert np.array_equal(np.array(ours), np.array(theirs))
        one = q[:, :, :1]
        mine = attention.scaled_dot_product_attention(one, k, v, None, 0.5, None)
        assert not np.array_equal(np.array(mine), np.array(attention._mlx_sdpa(
            one, k, v, None, scale=0.5, mask=None)))  # the kernel's own rounding: it ran
        monkeypatch.setenv("TANDEM_CPU_ATTENTION", "mlx")
        again = attention.scaled_dot_product_attention(one, k, v, None, 0.5, None)
        assert np.array_equal(np.array(again), np.array(attention._mlx_sdpa(
            one, k, v, None, scale=0.5, mask=None)))


def test_the_bundled_model_decodes_the_same_greedy_tokens(monkeypatch):
    """Twenty decode steps of the bundled model after a prompt, its attention
    on the kernel (install) against MLX's own: the same tokens, logits close."""
    from mlx_lm.models.cache import make_prompt_cache

    from engine.models.loader import load_model

    monkeypatch.setenv("TANDEM_CPU_ATTENTION", "tandem")  # not the probe's timing
    model = load_model("default").model
    prompt = mx.array([[1, 504, 3458, 282, 253, 1345, 28, 3151, 314, 260, 1226, 30]])

    def decode() -> tuple[list[int], list[np.ndarray]]:
        with mx.stream(mx.cpu):
            cache = make_prompt_cache(model)
            logits = model(prompt, cache=cache)[:, -1]
            tokens, rows = [], []
            for _ in range(20):
                token = int(mx.argmax(logits, axis=-1).item())
                tokens.append(token)
                logits = model(mx.array([[token]]), cache=cache)[:, -1]
                rows.append(np.array(logits.astype(mx.float32)))
        return tokens, rows

    module = __import__(type(model).__module__, fromlist=["x"])
    before = module.scaled_dot_product_attention
    theirs = decode()
    try:
        assert attention.install(model) >= 1
        assert module.scaled_dot_product_attention is attention.scaled_dot_product_attention
        ours = decode()
    finally:
        module.scaled_dot_product_attention = before
    assert ours[0] == theirs[0]
    for a, b in zip(ours[1], theirs[1]):
        assert np.abs(a - b).max() <= 1e-3 * (np.abs(b).max() + 1)


def test_the_choice_follows_the_measurement_and_the_forcing(monkeypatch):
    """MLX's path is chosen only where it is MLX_MARGIN faster (a Mac's
    sgemms on Accelerate may be); the probe times both paths for real; the
    environment forces either."""
    assert attention.verdict({"tandem": 1.0, "mlx": 0.9})[0] == "tandem"
    assert attention.verdict({"tandem": 1.0, "mlx": 1.0 / attention.MLX_MARGIN - 0.01})[0] == "mlx"
    assert "MLX's 0.7 ms" in attention.verdict({"tandem": 1.0, "mlx": 0.7})[1]
    ms = attention._timings(reps=2)
    assert set(ms) == {"tandem", "mlx"} and all(t > 0 for t in ms.values())
    monkeypatch.setenv("TANDEM_CPU_ATTENTION", "mlx")
    assert attention.choice() == ("mlx", "MLX's attention (forced)") and not attention.enabled()
    monkeypatch.setenv("TANDEM_CPU_ATTENTION", "tandem")
    assert attention.choice()[0] == "tandem" and attention.enabled()
    monkeypatch.delenv("TANDEM_CPU_ATTENTION")
    path, why = attention.choice()  # measured once a process, then read
    assert attention.enabled() == (path == "tandem") and "ms a call" in why
