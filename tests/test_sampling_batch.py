"""Batched sampling (engine/runtime/sampling.py) against mlx-lm's filters.

The distribution test draws with fixed seeds, so it gives the same counts on
every run: it cannot fail (or pass) by luck. Each row's exact distribution is
computed the way the row-by-row path did it: mlx-lm's apply_top_p, apply_min_p
and apply_top_k on the log-probabilities, then the temperature."""

from __future__ import annotations

import engine  # noqa: F401  (the system OpenBLAS before MLX)
import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p, make_repetition_penalty

from engine.core.params import SamplingParams
from engine.core.request import Request
from engine.runtime.sampling import TokenSampler, penalise, sample_rows

V = 64
DRAWS = 20_000
# Total variation distance allowed between the draws and the exact
# distribution: the expected distance for 40 outcomes at 20,000 draws is
# about 0.017; a filter or temperature that is wrong moves it by 0.1 or more.
TV_LIMIT = 0.035


def _logits() -> mx.array:
    """A row with a long tail and near-ties at the filters' edges."""
    rng = np.random.default_rng(7)
    return mx.array(np.sort(rng.normal(0, 2.0, V))[::-1].copy()[None, :], mx.float32)


def _exact(logits: mx.array, p: SamplingParams) -> np.ndarray:
    lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    if 0 < p.top_p < 1.0:
        lp = apply_top_p(lp, p.top_p)
    if p.min_p > 0:
        lp = apply_min_p(lp, p.min_p)
    if p.top_k > 0:
        lp = apply_top_k(lp, p.top_k)
    return np.array(mx.softmax(lp * (1.0 / p.temperature), axis=-1))[0]


def _draw_many(logits: mx.array, p: SamplingParams, by: str) -> np.ndarray:
    """DRAWS tokens in one batch: one row per seed, or one seed at
    successive positions (as one request's answer draws them)."""
    samplers = [TokenSampler(p) for _ in range(DRAWS)]
    for n, s in enumerate(samplers):
        if by == "seed":
            s.seed, s.position = n, 0
        else:
            s.seed, s.position = 12345, n
    rows = mx.broadcast_to(logits, (DRAWS, logits.shape[-1]))
    tokens = np.array(sample_rows(rows, samplers, lambda i, n: []))
    return np.bincount(tokens, minlength=logits.shape[-1]) / DRAWS


SETTINGS = [
    SamplingParams(temperature=0.7, top_p=0.95, top_k=40, min_p=0.05),  # the app's defaults
    SamplingParams(temperature=1.0, top_k=5),
    SamplingParams(temperature=1.3, top_p=0.8),
    SamplingParams(temperature=0.9, min_p=0.1),
    SamplingParams(temperature=1.0),
    SamplingParams(temperature=0.5, top_p=0.5, top_k=20),
]


@pytest.mark.parametrize("p", SETTINGS, ids=lambda p: f"t{p.temperature}-p{p.top_p}-k{p.top_k}"
                                                     f"-m{p.min_p}")
@pytest.mark.parametrize("by", ["seed", "position"])
def test_each_row_follows_the_filtered_distribution(p, by):
    logits = _logits()
    exact = _exact(logits, p)
    seen = _draw_many(logits, p, by)
    assert seen[exact == 0].sum() == 0  # nothing a filter removed is ever drawn
    assert 0.5 * np.abs(seen - exact).sum() < TV_LIMIT


def test_the_distribution_test_sees_a_wrong_distribution():
    """The same draws against a neighbouring setting's distribution fail."""
    logits = _logits()
    seen = _draw_many(logits, SETTINGS[0], "seed")
    for wrong in (SamplingParams(temperature=1.0, top_p=0.95, top_k=40, min_p=0.05),
                  SamplingParams(temperature=0.5, top_p=0.95, top_k=40, min_p=0.05),
                  SamplingParams(temperature=0.7, top_p=0.95, top_k=3, min_p=0.05),
                  SamplingParams(temperature=0.7, top_p=0.95, top_k=40, min_p=0.2)):
        assert 0.5 * np.abs(seen - _exact(logits, wrong)).sum() > 2 * TV_LIMIT


def test_a_mixed_batch_draws_each_row_as_it_would_alone():
    """Greedy, penalised, top-k and full-vocabulary rows together: each row's
    token is the one it gets alone (same seed and position)."""
    rng = np.random.default_rng(3)
    logits = mx.array(rng.normal(0, 3.0, (6, 500)), mx.float32)
    params = [SamplingParams(), SamplingParams(repetition_penalty=1.5),
              SamplingParams(temperature=0.7, top_p=0.95, top_k=40, min_p=0.05,
                             repetition_penalty=1.1, seed=1),
              SamplingParams(temperature=1.0, seed=2),
              SamplingParams(temperature=0.8, top_p=0.9, seed=3),
              SamplingParams(temperature=1.0, top_k=7, seed=4)]
    history = [[1, 2, 3], [int(np.argmax(np.array(logits[1])))], [5, 5, 9], [], [7], [8, 1]]
    fed = mx.array([11, 12, 13, 14, 15, 16])
    for step in range(5):
        batch = [TokenSampler(p) for p in params]
        for s in batch:
            s.position = step
        together = sample_rows(logits, batch, lambda i, n: history[i][-n:], fed).tolist()
        for i, p in enumerate(params):
            alone = TokenSampler(p)
            alone.position = step
            token = sample_rows(logits[i : i + 1], [alone], lambda _, n: history[i][-n:],
                                fed[i : i + 1]).item()
            assert token == together[i], (step, i)
    assert together[0] == int(np.argmax(np.array(logits[0])))
    # The penalised greedy row does not repeat its last token, the best logit.
    assert together[1] != history[1][0]


def test_the_penalty_is_mlx_lm_s_for_every_row():
    rng = np.random.default_rng(5)
    logits = mx.array(rng.normal(0, 2.0, (4, 300)), mx.float32)
    params = [SamplingParams(repetition_penalty=1.3, repetition_context_size=4),
              SamplingParams(),
              SamplingParams(repetition_penalty=0.8, repetition_context_size=64),
              SamplingParams(repetition_penalty=2.0)]
    history = [[3, 9, 9, 4, 7, 200, 3], [1, 2], [], [17]]
    fed = mx.array([3, 5, 250, 17])
    samplers = [TokenSampler(p) for p in params]
    rows = [i for i, s in enumerate(samplers) if s.needs_context]
    got = penalise(logits, rows, samplers, lambda i, n: history[i][-n:], fed)
    for i, p in enumerate(params):
        want = logits[i : i + 1]
        if p.repetition_penalty != 1.0:
            context = mx.array(history[i] + [fed[i].item()])
            want = make_repetition_penalty(p.repetition_penalty, p.repetition_context_size)(
                context, want)
        assert mx.array_equal(got[i : i + 1], want), i


def test_recent_ids_are_the_tail_of_prompt_and_answer():
    request = Request([1, 2, 3, 4], SamplingParams())
    request.output_ids = [5, 6]
    for n in range(0, 9):
        assert request.recent_ids(n) == (request.all_ids[-n:] if n else [])


@pytest.mark.parametrize("vocab,k", [(49152, 40), (32064, 40), (32000, 1), (5000, 100),
                                     (300, 40)])
def test_the_top_k_search_by_blocks_is_exact(vocab, k):
    """Padded and unpadded vocabularies, ties (a grammar's -inf) included."""
    from engine.runtime.sampling import _top_ids

    rng = np.random.default_rng(vocab)
    values = rng.normal(0, 3.0, (5, vocab)).astype(np.float32)
    values[1, : vocab // 2] = -np.inf  # a constrained row: half the vocabulary masked
    values[2] = np.round(values[2])  # many ties
    got = np.array(_top_ids(mx.array(values), k))
    for row, ids in zip(values, got):
        assert len(set(ids.tolist())) == k
        kth = np.sort(row)[::-1][k - 1]
        assert (row[ids] >= kth).all()  # every id is among the k largest (ties either way)
