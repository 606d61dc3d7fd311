"""Logprobs from the same forward pass the sampler used (issue 23): each
output token's log-probability under the model's raw distribution (before
temperature, penalties and filters) and the likeliest alternatives, checked
against a separate teacher-forced pass of the model over prompt + answer;
requests with and without logprobs share the batch, and a request moving
between lanes keeps them."""

from __future__ import annotations

import mlx.core as mx
import pytest

from engine import EngineError, LaneSpec, SamplingParams, Token
from tests.helpers import prompt_of
from tests.test_two_lanes import PingPong, _two_lanes

TEXTS = ["hello world, how are you today?", "numbers 0123456789 and emoji", "hello"]


def _reference(loaded, prompt: list[int], output: list[int]) -> mx.array:
    """log_softmax of the logits that predicted each output token (one pass)."""
    ids = mx.array([prompt + output[:-1]])
    logits = loaded.model(ids)[0, len(prompt) - 1:, :].astype(mx.float32)
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


def _tokens(handle) -> list[Token]:
    return [e for e in handle if isinstance(e, Token) and e.token_id >= 0]


def _check(loaded, prompt, handle, k):
    tokens = _tokens(handle)
    output = handle.request.output_ids
    reference = _reference(loaded, prompt, output)
    assert tokens, "no tokens"
    for i, token in enumerate(tokens):
        row = reference[i]
        assert token.token_id == output[i]
        assert token.logprob == pytest.approx(row[token.token_id].item(), abs=2e-3)
        assert len(token.top_logprobs) == k
        if k:
            best = mx.argsort(-row)[:k].tolist()
            assert [t for t, _ in token.top_logprobs] == best
            lps = [lp for _, lp in token.top_logprobs]
            assert lps == sorted(lps, reverse=True)
            for t, lp in token.top_logprobs:
                assert lp == pytest.approx(row[t].item(), abs=2e-3)
    return tokens


def test_logprobs_in_a_mixed_batch_match_a_teacher_forced_pass(make_engine, tiny_loaded):
    engine = make_engine()
    prompts = [prompt_of(tiny_loaded, t) for t in TEXTS]
    plain = engine.submit(prompt_ids=prompts[0], params=SamplingParams(max_tokens=24))
    greedy = engine.submit(prompt_ids=prompts[1],
                           params=SamplingParams(max_tokens=24, logprobs=5))
    # Sampled at temperature 1.5 with top-p: the logprobs stay the raw model's.
    sampled = engine.submit(prompt_ids=prompts[2], params=SamplingParams(
        max_tokens=24, temperature=1.5, top_p=0.9, repetition_penalty=1.2, seed=7,
        logprobs=0))
    tokens = _check(tiny_loaded, prompts[1], greedy, 5)
    for token in tokens:  # greedy: the chosen token is the likeliest
        assert token.top_logprobs[0][0] == token.token_id
    _check(tiny_loaded, prompts[2], sampled, 0)
    assert all(t.logprob is None and t.top_logprobs == () for t in _tokens(plain))


def test_a_request_keeps_its_logprobs_across_lanes(make_engine, tiny_loaded):
    engine = make_engine(_two_lanes(), policy=PingPong())
    for lane in engine.lanes.values():
        lane.reconsider_every = 1
    prompt = prompt_of(tiny_loaded, TEXTS[0])
    handle = engine.submit(prompt_ids=prompt, params=SamplingParams(max_tokens=60, logprobs=2))
    other = engine.submit(prompt_ids=prompt_of(tiny_loaded, TEXTS[1]),
                          params=SamplingParams(max_tokens=60))
    tokens = _check(tiny_loaded, prompt, handle, 2)
    other.result(60)
    done = handle.result(60)
    assert done.lanes[:3] == (("prefill", "gpu"), ("decode", "cpu"), ("decode", "gpu"))
    assert len(tokens) == len(handle.request.output_ids) - (
        1 if handle.request.output_ids[-1] in tiny_loaded.stop_token_ids else 0)


def test_logprobs_bounds():
    with pytest.raises(EngineError):
        SamplingParams(logprobs=21)
    with pytest.raises(EngineError):
        SamplingParams(logprobs=-1)
    assert SamplingParams(logprobs=20).logprobs == 20


def test_a_lone_request_and_the_first_token_have_logprobs(make_engine, tiny_loaded):
    engine = make_engine([LaneSpec("cpu", "cpu", "float32")])
    prompt = prompt_of(tiny_loaded, "hello world")
    handle = engine.submit(prompt_ids=prompt, params=SamplingParams(max_tokens=5, logprobs=1))
    tokens = _check(tiny_loaded, prompt, handle, 1)
    assert tokens[0].logprob is not None  # the first token, sampled at prefill's end
