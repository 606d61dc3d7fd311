"""Ragged batch caches (engine/runtime/ragged.py) and drafts verified in a
batch (engine/runtime/verify.py: verify_rows), on a real tiny model: rows
of different lengths decode exactly as each would alone; a row's rejected
positions leave it without touching the others; rows join, leave and are
extracted; each row's drafted answer is its plain answer, greedy or
sampled with a seed."""

from __future__ import annotations

import engine  # noqa: F401  (the system OpenBLAS before MLX)
import mlx.core as mx
from mlx_lm.models.cache import KVCache, make_prompt_cache

from engine.core.params import SamplingParams
from engine.runtime.ragged import Offsets, RaggedKVCache
from engine.runtime.sampling import TokenSampler, sample_rows
from engine.runtime.verify import verify_rows, why_no_drafts

PROMPTS = [[1, 5, 7, 9, 11], [3, 4], [8, 8, 9, 10, 2, 3, 4, 5, 6]]
NEAR_TIE = 1e-4


def _prefilled(model, prompt):
    caches = make_prompt_cache(model)
    model(mx.array([prompt[:-1]]), cache=caches)
    return caches


def _ragged(model, prompts):
    offsets = Offsets()
    return [RaggedKVCache.merge(list(layer), offsets)
            for layer in zip(*[_prefilled(model, p) for p in prompts])]


def _alone(model, prompt, count, params=None):
    """One token per forward on the request's own caches: (tokens, logits
    rows, the gap between the two best logits at each)."""
    caches, fed, out, rows, gaps = _prefilled(model, prompt), prompt[-1], [], [], []
    sampler = TokenSampler(params or SamplingParams())
    for _ in range(count):
        logits = model(mx.array([[fed]]), cache=caches)[:, -1]
        best = mx.topk(logits[0], 2).tolist()
        gaps.append(abs(best[1] - best[0]))
        rows.append(logits[0])
        fed = int(sample_rows(logits, [sampler], lambda _, n: (prompt + out)[-n:]).item())
        out.append(fed)
    return out, rows, gaps


def test_rows_of_different_lengths_decode_as_they_would_alone(tiny_loaded):
    model = tiny_loaded.model
    alone = [_alone(model, p, 6) for p in PROMPTS]
    cache = _ragged(model, PROMPTS)
    fed = [p[-1] for p in PROMPTS]
    for step in range(6):
        logits = model(mx.array(fed)[:, None], cache=cache)[:, -1]
        fed = mx.argmax(logits, axis=-1).tolist()
        for row, (tokens, rows, _) in enumerate(alone):
            assert fed[row] == tokens[step]
            assert mx.allclose(logits[row], rows[step], atol=1e-4).item()
    assert cache[0].lengths == [len(p) + 5 for p in PROMPTS]


def test_a_row_rewinds_alone_and_rows_join_leave_and_come_out(tiny_loaded):
    model = tiny_loaded.model
    cache = _ragged(model, PROMPTS)
    # Each row is fed three tokens; row 1 keeps two of them, the others
    # none: as if the rest were never fed.
    inputs = mx.array([[11, 11, 11], [4, 7, 9], [6, 6, 6]])
    model(inputs, cache=cache)
    for layer in cache:
        layer.rewind([3, 1, 3])
    assert cache[0].lengths == [len(PROMPTS[0]) - 1, len(PROMPTS[1]) + 1, len(PROMPTS[2]) - 1]
    fed = [11, 9, 6]
    logits = model(mx.array(fed)[:, None], cache=cache)[:, -1]
    again = model(mx.array([PROMPTS[1] + [7, 9]]), cache=make_prompt_cache(model))[0, -1]
    assert mx.allclose(logits[1], again, atol=1e-4).item()
    assert mx.allclose(logits[0], _alone(model, PROMPTS[0], 1)[1][0], atol=1e-4).item()
    assert mx.allclose(logits[2], _alone(model, PROMPTS[2], 1)[1][0], atol=1e-4).item()
    # Row 0 leaves; a new request joins; each row comes out as its own KV.
    for layer in cache:
        layer.filter([1, 2])
    joined = _ragged(model, [[2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]])
    for mine, theirs in zip(cache, joined):
        mine.extend(theirs)
    assert cache[0].lengths == [len(PROMPTS[1]) + 2, len(PROMPTS[2]), 11]
    out = [layer.extract(0) for layer in cache]
    assert isinstance(out[0], KVCache) and out[0].offset == len(PROMPTS[1]) + 2
    logits = model(mx.array([[5]]), cache=out)[0, -1]
    again = model(mx.array([PROMPTS[1] + [7, 9, 5]]), cache=make_prompt_cache(model))[0, -1]
    assert mx.allclose(logits, again, atol=1e-4).item()
    assert why_no_drafts(cache) is None


class _Oracle:
    """Proposes a row's plain answer ahead, one token wrong in every other
    proposal at a position that moves, and now and then nothing."""

    def __init__(self, answer):
        self.answer, self.at, self.calls = answer, 0, 0

    def propose(self, k):
        self.calls += 1
        if self.calls % 5 == 0:
            return []
        proposal = list(self.answer[self.at:self.at + k])
        if proposal and self.calls % 2 == 0:
            wrong = self.calls % len(proposal)
            proposal[wrong] = (proposal[wrong] + 1) % 50
        return proposal


def _drafted_rows(model, prompts, answers, count, params, k=4):
    cache = _ragged(model, prompts)
    samplers = [TokenSampler(params) for _ in prompts]
    oracles = [_Oracle(a) for a in answers]
    fed = [p[-1] for p in prompts]
    out = [[] for _ in prompts]
    accepted = 0
    while min(len(o) for o in out) < count:
        proposals = [o.propose(k + i) for i, o in enumerate(oracles)]  # widths differ
        histories = [(p + o)[-64:] for p, o in zip(prompts, out)]
        results = verify_rows(model, cache, fed, proposals, samplers, histories)
        for row, verified in enumerate(results):
            out[row].extend(verified.tokens)
            oracles[row].at += len(verified.tokens)
            accepted += len(verified.accepted)
            fed[row] = verified.tokens[-1]
            # The caches hold the prompt and every token fed: nothing rejected.
            assert cache[0].lengths[row] == len(prompts[row]) + len(out[row]) - 1
    return [o[:count] for o in out], accepted


def _same_or_near_tie(drafted, plain, gaps):
    if drafted != plain:
        first = next(i for i, (a, b) in enumerate(zip(drafted, plain)) if a != b)
        assert gaps[first] < NEAR_TIE, (first, gaps[first])


def test_each_row_of_a_drafted_batch_writes_its_plain_answer(tiny_loaded):
    model = tiny_loaded.model
    greedy = SamplingParams()
    alone = [_alone(model, p, 30, greedy) for p in PROMPTS]
    drafted, accepted = _drafted_rows(model, PROMPTS, [a[0] for a in alone], 30, greedy)
    assert accepted > 20  # runs accepted in the batch, misses rewound per row
    for row, (tokens, _, gaps) in enumerate(alone):
        _same_or_near_tie(drafted[row], tokens, gaps)


def test_seeded_sampled_rows_draw_the_same_tokens_drafted(tiny_loaded):
    model = tiny_loaded.model
    params = SamplingParams(temperature=0.9, top_p=0.95, top_k=40, min_p=0.05,
                            repetition_penalty=1.1, seed=11)
    alone = [_alone(model, p, 24, params) for p in PROMPTS]
    drafted, accepted = _drafted_rows(model, PROMPTS, [a[0] for a in alone], 24, params)
    assert accepted > 10
    for row, (tokens, _, gaps) in enumerate(alone):
        _same_or_near_tie(drafted[row], tokens, gaps)
