"""Drafts verified on a lone request's caches (engine/runtime/verify.py), on
a real tiny model: the answer is the plain greedy answer (or the first
difference is at a near-tie, where one wide forward and single steps may
round differently), rejected positions leave the caches, and caches that
cannot rewind say so."""

from __future__ import annotations

import engine  # noqa: F401  (the system OpenBLAS before MLX)
import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, KVCache, make_prompt_cache

from engine.core.drafts import LookupDrafter
from engine.runtime.verify import verify_greedy, why_no_drafts

NEAR_TIE = 1e-4


def _prefilled(model, prompt):
    caches = make_prompt_cache(model)
    model(mx.array([prompt[:-1]]), cache=caches)
    return caches


def _plain(model, prompt, count):
    """One token per forward; with the gap between the two best logits."""
    caches, fed, out, gaps = _prefilled(model, prompt), prompt[-1], [], []
    for _ in range(count):
        logits = model(mx.array([[fed]]), cache=caches)[0, -1]
        best = mx.topk(logits, 2).tolist()
        gaps.append(abs(best[1] - best[0]))
        fed = int(mx.argmax(logits).item())
        out.append(fed)
    return out, gaps


class _Oracle:
    """Proposes the plain answer's next tokens, one of them wrong in every
    other proposal (at a position that moves): runs accepted whole, cut
    short, and missed at once, deterministically."""

    def __init__(self, answer):
        self.answer, self.at, self.calls = answer, 0, 0

    def propose(self, k):
        proposal = list(self.answer[self.at:self.at + k])
        self.calls += 1
        if proposal and self.calls % 2 == 0:
            wrong = self.calls % len(proposal)
            proposal[wrong] = (proposal[wrong] + 1) % 50
        return proposal

    def extend(self, tokens):
        self.at += len(tokens)


def _drafted(model, prompt, count, k, drafter):
    caches, fed, out = _prefilled(model, prompt), prompt[-1], []
    proposed = accepted = 0
    while len(out) < count:
        proposal = drafter.propose(k)
        emitted = verify_greedy(model, caches, fed, proposal)
        proposed += len(proposal)
        accepted += len(emitted) - 1
        drafter.extend(emitted)
        out.extend(emitted)
        fed = emitted[-1]
        # The caches hold the prompt and every token fed: nothing rejected.
        assert caches[0].offset == len(prompt) + len(out) - 1
    return out[:count], proposed, accepted


def _same_or_near_tie(drafted, plain, gaps):
    if drafted != plain:
        first = next(i for i, (a, b) in enumerate(zip(drafted, plain)) if a != b)
        assert gaps[first] < NEAR_TIE, (first, gaps[first])


def test_drafted_greedy_is_plain_greedy(tiny_loaded):
    model = tiny_loaded.model
    prompt = list(tiny_loaded.tokenizer.encode("one two three one two three one two"))
    plain, gaps = _plain(model, prompt, 60)
    for k in (1, 4, 8):
        drafted, proposed, accepted = _drafted(model, prompt, 60, k, _Oracle(plain))
        assert proposed > accepted > 0  # accepted runs and trimmed misses both ran
        _same_or_near_tie(drafted, plain, gaps)
        # Lookup over this text proposes little a random model accepts: the
        # answer is still the plain one.
        drafted, _, _ = _drafted(model, prompt, 60, k, LookupDrafter(prompt))
        _same_or_near_tie(drafted, plain, gaps)


def test_a_miss_takes_its_positions_back_off_the_caches(tiny_loaded):
    model = tiny_loaded.model
    prompt = list(tiny_loaded.tokenizer.encode("hello there"))
    caches = _prefilled(model, prompt)
    before = caches[0].offset
    target = _plain(model, prompt, 1)[0][0]
    wrong = (target + 1) % 50
    emitted = verify_greedy(model, caches, prompt[-1], [wrong, wrong, wrong])
    assert emitted == [target]  # none accepted: the target's own token
    assert caches[0].offset == before + 1  # only the fed token stays


def test_caches_that_cannot_rewind_draft_nothing():
    assert why_no_drafts([KVCache(), KVCache()]) is None
    why = why_no_drafts([KVCache(), ArraysCache(2)])
    assert why is not None and "ArraysCache" in why
