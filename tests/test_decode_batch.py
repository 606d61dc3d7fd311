"""The decode batch's lone-request path: one request decodes on its own layer
caches (as mlx-lm's stream_generate does, so no attention mask), becomes a
batch cache row when a second joins and gets its own caches back when it is
the last one left; tokens equal mlx-lm's greedy ones throughout. Real MLX
forward passes on tiny random models (plain and sliding-window attention)."""

import threading

import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache

from engine.core.params import SamplingParams
from engine.core.request import Request
from engine.models.loader import load_model
from engine.runtime.batch import DecodeBatch
from engine.runtime.sampling import TokenSampler
from tests.families import build_family
from tests.helpers import prompt_of, reference_greedy

TEXTS = ["hello world, how are you today? I am fine, thank you very much.",
         "the quick brown fox jumps over the lazy dog, and then the fox runs"]


def _prefilled(model, ids):
    caches = make_prompt_cache(model)
    logits = model(mx.array([ids]), cache=caches)[:, -1, :]
    return caches, mx.argmax(logits, axis=-1)


def _decode(batch, out, steps):
    for _ in range(steps):
        fed = batch.step().tolist()
        for request, token in zip(batch.requests, fed):
            out[request.request_id].append(token)


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_lone_request_on_own_caches_then_batched_then_alone_again(tmp_path, family):
    loaded = load_model(str(build_family(family, tmp_path / family)))
    model = loaded.model
    ids = [prompt_of(loaded, t) for t in TEXTS]
    expected = [reference_greedy(loaded, p, 30) for p in ids]
    requests = [Request(p, SamplingParams(max_tokens=30)) for p in ids]
    out = {r.request_id: [] for r in requests}
    batch = DecodeBatch(model)
    single_kinds = {type(c).__name__ for c in make_prompt_cache(model)}

    batch.add(requests[0], TokenSampler(requests[0].params), *_prefilled(model, ids[0]))
    assert batch.solo and {type(c).__name__ for c in batch.cache} == single_kinds
    _decode(batch, out, 6)

    batch.add(requests[1], TokenSampler(requests[1].params), *_prefilled(model, ids[1]))
    assert not batch.solo
    assert all(type(c).__name__.startswith("Batch") for c in batch.cache)
    _decode(batch, out, 8)

    batch.keep([1])  # the first leaves: the second is alone again
    assert batch.solo and {type(c).__name__ for c in batch.cache} == single_kinds
    _decode(batch, out, 10)

    for request, want in zip(requests, expected):
        got = out[request.request_id]
        n = min(len(got), len(want))
        assert n >= 10 and got[:n] == want[:n], family
    assert len(out[requests[1].request_id]) == 18

    only = batch.extract(0)  # the lone request's KV for the prefix cache: its own caches
    assert only[0] is batch.cache[0]


def test_batch_of_one_path_can_be_turned_off(tiny_loaded):
    """`solo=False` keeps a lone request on a batch cache (the old path; a
    benchmark compares the two)."""
    ids = prompt_of(tiny_loaded, TEXTS[0])
    expected = reference_greedy(tiny_loaded, ids, 12)
    request = Request(ids, SamplingParams(max_tokens=12))
    out = {request.request_id: []}
    batch = DecodeBatch(tiny_loaded.model, solo=False)
    batch.add(request, TokenSampler(request.params), *_prefilled(tiny_loaded.model, ids))
    assert not batch.solo and type(batch.cache[0]).__name__ == "BatchKVCache"
    _decode(batch, out, 12)
    n = min(12, len(expected))
    assert out[request.request_id][:n] == expected[:n]


class HoldFirstStep:
    """A StepGate that holds the lane's first step until the test releases it,
    so that requests submitted meanwhile are planned in one step."""

    def __init__(self):
        self.release = threading.Event()

    def begin(self, lane):
        assert self.release.wait(60)

    def end(self, lane, plan, measured_s):
        return measured_s

    def idle(self, lane):
        pass


@pytest.mark.parametrize("batch_prefill", [True, False])
def test_prompts_arriving_together_are_prefilled_in_one_batch(make_engine, tiny_loaded,
                                                              monkeypatch, batch_prefill):
    """Whole cold prompts planned in one step run as one batched forward
    (similar lengths together); answers equal mlx-lm's greedy ones, and a
    seeded sampled request gives the same tokens as when it runs alone."""
    from engine import LaneConfig, LaneSpec, SamplingParams
    from engine.runtime import runner as runner_module

    calls = []
    real = runner_module.run_together

    def spy(model, prefills):
        calls.append(len(prefills))
        return real(model, prefills)

    monkeypatch.setattr(runner_module, "run_together", spy)
    gate = HoldFirstStep()
    engine = make_engine([LaneSpec("cpu", "cpu", "float32",
                                   LaneConfig(gate=gate, batch_prefill=batch_prefill))])
    texts = TEXTS + ["hello world, how are you today? I am fine, thanks a lot, truly.",
                     "système café naïve"]
    ids = [prompt_of(tiny_loaded, t) for t in texts]
    handles = [engine.submit(prompt_ids=p, params=SamplingParams(max_tokens=12)) for p in ids]
    seeded = SamplingParams(max_tokens=12, temperature=0.8, seed=7)
    sampled = engine.submit(prompt_ids=ids[1], params=seeded)
    gate.release.set()
    for handle, p in zip(handles, ids):
        handle.result(60)
        assert handle.request.output_ids == reference_greedy(tiny_loaded, p, 12)
    together = sampled.result(60)
    alone = engine.generate(prompt_ids=ids[1], params=seeded, timeout=60)
    assert together.text == alone.text
    if batch_prefill:
        # Three prompts of one length and one a little longer in a batch;
        # the short one (much shorter: too much padding) alone.
        assert calls and sum(calls) >= 3, calls
    else:
        assert calls == []


def test_requests_joining_together_are_merged_at_once(tiny_loaded):
    """Several joins in one step: one merge and one extend per layer; the
    rows decode as they would alone, whether the batch was empty or held a
    lone request on its own caches."""
    model = tiny_loaded.model
    texts = TEXTS + ["système café naïve", "hello world"]
    ids = [prompt_of(tiny_loaded, t) for t in texts]
    expected = [reference_greedy(tiny_loaded, p, 10) for p in ids]
    requests = [Request(p, SamplingParams(max_tokens=10)) for p in ids]
    out = {r.request_id: [] for r in requests}
    batch = DecodeBatch(model)

    def joining(indices):
        return [(requests[i], TokenSampler(requests[i].params), *_prefilled(model, ids[i]))
                for i in indices]

    batch.add_many(joining([0]))
    assert batch.solo
    batch.add_many(joining([1, 2]))  # the lone request's caches become batch caches
    assert not batch.solo and len(batch) == 3
    _decode(batch, out, 4)
    batch.add_many(joining([3]))
    _decode(batch, out, 10)
    for request, want in zip(requests, expected):
        got = out[request.request_id]
        n = min(len(got), len(want))
        assert n >= 10 and got[:n] == want[:n]

    fresh = DecodeBatch(model)
    fresh.add_many(joining([0, 1]))  # an empty batch, two at once: a batch cache
    assert not fresh.solo and type(fresh.cache[0]).__name__ == "BatchKVCache"
