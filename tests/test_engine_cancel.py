"""Cancelling during prefill and during decode frees the slot; others are unaffected."""

import time

from engine import LaneConfig, LaneSpec, SamplingParams
from tests.helpers import TokenCounter, prompt_of, reference_greedy

OTHERS = ["hello world, how are you today?", "numbers 0123456789 and emoji"]


def _wait_idle(lane, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not lane.is_idle and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lane.is_idle


def test_cancel_during_decode(make_engine, tiny_loaded):
    engine = make_engine()
    counter = TokenCounter(engine)
    others = [engine.submit(prompt_ids=prompt_of(tiny_loaded, t),
                            params=SamplingParams(max_tokens=30)) for t in OTHERS]
    victim = engine.submit(prompt_ids=prompt_of(tiny_loaded, "hello"),
                           params=SamplingParams(max_tokens=400))
    counter.wait_for(victim.request_id, 3)
    victim.cancel()
    done = victim.result(30)
    assert done.reason == "cancelled"
    assert 3 <= done.output_tokens < 400
    for handle, text in zip(others, OTHERS):
        handle.result(60)
        assert handle.request.output_ids == reference_greedy(
            tiny_loaded, prompt_of(tiny_loaded, text), 30)
    lane = engine.lanes["cpu"]
    _wait_idle(lane)
    assert lane.batch_size == 0 and lane.kv_bytes == 0


def test_cancel_during_prefill(make_engine, tiny_loaded):
    # Tiny chunks make the long prompt's prefill span many steps.
    engine = make_engine([LaneSpec("cpu", "cpu", "float32",
                                   LaneConfig(prefill_chunk=4, prefill_chunk_busy=4))])
    counter = TokenCounter(engine)
    other = engine.submit(prompt_ids=prompt_of(tiny_loaded, OTHERS[0]),
                          params=SamplingParams(max_tokens=60))
    counter.wait_for(other.request_id, 1)
    long_ids = prompt_of(tiny_loaded, "the quick brown fox " * 20)
    victim = engine.submit(prompt_ids=long_ids, params=SamplingParams(max_tokens=10))
    lane = engine.lanes["cpu"]
    deadline = time.monotonic() + 30
    while victim.request.num_computed == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    victim.cancel()
    done = victim.result(30)
    assert done.reason == "cancelled"
    assert done.output_tokens == 0
    assert victim.request.num_computed < len(long_ids)
    other.result(60)
    assert other.request.output_ids == reference_greedy(
        tiny_loaded, prompt_of(tiny_loaded, OTHERS[0]), 60)
    _wait_idle(lane)
    assert lane.batch_size == 0 and lane.kv_bytes == 0


def test_cancel_waiting_request_and_tab(make_engine, tiny_loaded):
    engine = make_engine([LaneSpec("cpu", "cpu", "float32", LaneConfig(max_batch=1))])
    first = engine.submit(prompt_ids=prompt_of(tiny_loaded, OTHERS[0]),
                          params=SamplingParams(max_tokens=30), tab_id="a")
    queued = engine.submit(prompt_ids=prompt_of(tiny_loaded, OTHERS[1]),
                           params=SamplingParams(max_tokens=30), tab_id="b")
    engine.cancel_tab("b")
    assert queued.result(30).reason == "cancelled"
    assert queued.result().output_tokens == 0
    assert first.result(60).reason in ("length", "stop")


def test_close_cancels_everything(make_engine, tiny_loaded):
    engine = make_engine()
    handle = engine.submit(prompt_ids=prompt_of(tiny_loaded, "hello"),
                           params=SamplingParams(max_tokens=10_000))
    engine.close()
    assert handle.result(30).reason in ("cancelled", "length")
