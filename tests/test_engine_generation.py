"""Real MLX forward passes on a tiny model, through the real loader and lanes."""

import pytest

from engine import Finished, SamplingParams, Token
from tests.helpers import TokenCounter, prompt_of, reference_greedy

PROMPTS = [
    "hello world",
    "the quick brown fox jumps over the lazy dog, and then the fox",
    "café",
    "Tandem batches chats on the CPU and the GPU. Prefill and decode. " * 3,
]


def test_greedy_matches_mlx_lm(make_engine, tiny_loaded):
    engine = make_engine()
    for text in PROMPTS[:2]:
        ids = prompt_of(tiny_loaded, text)
        handle = engine.submit(prompt_ids=ids, params=SamplingParams(max_tokens=24))
        handle.result(60)
        assert handle.request.output_ids == reference_greedy(tiny_loaded, ids, 24)


def test_batched_equals_alone_with_staggered_joins(make_engine, tiny_loaded):
    engine = make_engine()
    params = SamplingParams(max_tokens=20)
    ids = [prompt_of(tiny_loaded, t) for t in PROMPTS]
    alone = [reference_greedy(tiny_loaded, p, 20) for p in ids]
    counter = TokenCounter(engine)
    handles = []
    for i, p in enumerate(ids):
        handles.append(engine.submit(prompt_ids=p, params=params))
        if i < len(ids) - 1:
            counter.wait_for(handles[-1].request_id, 2 + i)  # join at different steps
    for handle, expected in zip(handles, alone):
        handle.result(60)
        assert handle.request.output_ids == expected
    # The check means something only if several requests ran side by side.
    assert sum(len(a) >= 15 for a in alone) >= 3


def test_events_stream_in_order_with_stats(make_engine, tiny_loaded):
    engine = make_engine()
    seen = []
    handle = engine.submit(prompt_ids=prompt_of(tiny_loaded, "hello"),
                           params=SamplingParams(max_tokens=8), tab_id="tab-1")
    for event in handle:
        seen.append(event)
    kinds = [type(e).__name__ for e in seen]
    assert kinds[:2] == ["Queued", "Routed"]
    assert "Token" in kinds and kinds[-1] == "Finished"
    done = seen[-1]
    assert done.tab_id == "tab-1"
    assert done.output_tokens == len(handle.request.output_ids)
    assert done.ttft_s is not None and done.ttft_s > 0 and done.e2e_s >= done.ttft_s
    assert done.lanes == (("prefill", "cpu"), ("decode", "cpu"))
    text = "".join(e.text for e in seen if isinstance(e, Token))
    assert text == done.text


def test_warm_follow_up_equals_cold(make_engine, tiny_loaded):
    warm = make_engine()
    first = prompt_of(tiny_loaded, PROMPTS[1])
    handle = warm.submit(prompt_ids=first, params=SamplingParams(max_tokens=16))
    handle.result(60)
    follow = first + handle.request.output_ids + prompt_of(tiny_loaded, "and again?")
    warm_run = warm.submit(prompt_ids=follow, params=SamplingParams(max_tokens=16))
    warm_done = warm_run.result(60)
    assert warm_done.cached_tokens >= len(first) - warm.prefix_cache.block_size
    assert warm_done.cached_tokens % warm.prefix_cache.block_size == 0
    cold = make_engine()
    cold_run = cold.submit(prompt_ids=follow, params=SamplingParams(max_tokens=16))
    assert cold_run.result(60).cached_tokens == 0
    assert warm_run.request.output_ids == cold_run.request.output_ids
    assert warm_run.request.output_ids == reference_greedy(tiny_loaded, follow, 16)


def test_seeded_sampling_is_reproducible_alone_and_batched(make_engine, tiny_loaded):
    engine = make_engine()
    params = SamplingParams(max_tokens=16, temperature=0.9, top_p=0.9, top_k=50, seed=7,
                            repetition_penalty=1.2)
    ids = prompt_of(tiny_loaded, PROMPTS[0])
    alone = engine.submit(prompt_ids=ids, params=params)
    alone.result(60)
    others = [engine.submit(prompt_ids=prompt_of(tiny_loaded, t),
                            params=SamplingParams(max_tokens=16)) for t in PROMPTS[1:]]
    batched = engine.submit(prompt_ids=ids, params=params)
    batched.result(60)
    for o in others:
        o.result(60)
    assert alone.request.output_ids == batched.request.output_ids
    different = engine.submit(prompt_ids=ids, params=SamplingParams(
        max_tokens=16, temperature=0.9, seed=8))
    different.result(60)
    assert different.request.output_ids != alone.request.output_ids


def test_max_tokens_and_stop_string(make_engine, tiny_loaded):
    engine = make_engine()
    ids = prompt_of(tiny_loaded, PROMPTS[1])
    full = engine.generate(prompt_ids=ids, params=SamplingParams(max_tokens=12))
    assert full.reason == "length" and full.output_tokens == 12
    # Stop at a piece of text the model is known to produce.
    needle = full.text[len(full.text) // 2 : len(full.text) // 2 + 2]
    assert needle
    stopped = engine.generate(prompt_ids=ids, params=SamplingParams(max_tokens=12, stop=(needle,)))
    assert stopped.reason == "stop"
    assert needle not in stopped.text
    assert full.text.startswith(stopped.text)


def test_long_prompt_is_prefilled_in_chunks_while_others_decode(make_engine, tiny_loaded):
    from engine import LaneConfig, LaneSpec

    engine = make_engine([LaneSpec("cpu", "cpu", "float32",
                                   LaneConfig(prefill_chunk=32, prefill_chunk_busy=16))])
    counter = TokenCounter(engine)
    short = engine.submit(prompt_ids=prompt_of(tiny_loaded, "hello"),
                          params=SamplingParams(max_tokens=40))
    counter.wait_for(short.request_id, 1)
    long_ids = prompt_of(tiny_loaded, PROMPTS[3] * 2)
    assert len(long_ids) > 100
    steps_before = engine.lanes["cpu"].stats.steps
    long = engine.submit(prompt_ids=long_ids, params=SamplingParams(max_tokens=4))
    long.result(60)
    short_done = short.result(60)
    # The long prompt took several steps, and the short request kept
    # decoding during them: it got tokens while the long one prefilled.
    assert engine.lanes["cpu"].stats.steps - steps_before >= len(long_ids) // 16
    assert short_done.output_tokens == len(short.request.output_ids)
    assert long.request.output_ids == reference_greedy(tiny_loaded, long_ids, 4)
    assert short.request.output_ids == reference_greedy(
        tiny_loaded, prompt_of(tiny_loaded, "hello"), 40)


def test_prompt_longer_than_context_is_refused(make_engine, tiny_loaded):
    from engine import EngineError

    engine = make_engine()
    with pytest.raises(EngineError, match="context") as info:
        engine.submit(prompt_ids=[5] * 600)
    assert info.value.kind == "prompt-too-long"
    # The engine still works afterwards.
    assert engine.generate(prompt_ids=prompt_of(tiny_loaded, "hi"),
                           params=SamplingParams(max_tokens=3), timeout=60).output_tokens >= 1


def test_text_that_is_not_text_is_refused_clearly(make_engine, tiny_loaded):
    from engine import EngineError

    engine = make_engine()
    bad = b"caf\xe9 ok".decode("utf-8", "surrogateescape")  # how Python keeps raw bytes
    with pytest.raises(EngineError, match=r"Message 2 is not valid text.*U\+DCE9") as info:
        engine.submit([{"role": "system", "content": "hi"}, {"role": "user", "content": bad}])
    assert info.value.kind == "bad-argument"
    with pytest.raises(EngineError, match="Message 1 has no text content"):
        engine.submit([{"role": "user", "content": None}])
    assert engine.generate([{"role": "user", "content": "hi"}],
                           SamplingParams(max_tokens=2), timeout=60).output_tokens >= 1


def test_finished_is_delivered_to_subscribers(make_engine, tiny_loaded):
    engine = make_engine()
    finished = []
    engine.subscribe(lambda e: finished.append(e) if isinstance(e, Finished) else None)
    engine.generate(prompt_ids=prompt_of(tiny_loaded, "hi"), params=SamplingParams(max_tokens=3),
                    timeout=60)
    assert len(finished) == 1


def test_a_single_lane_starts_without_calibrating(make_engine, tiny_loaded):
    engine = make_engine()
    (lane,) = engine.lanes.values()
    assert lane.cost is None  # nothing to route: no calibration at start
    handle = engine.submit(prompt_ids=tiny_loaded.tokenizer.encode("hello there"),
                           params=SamplingParams(max_tokens=5))
    assert handle.result(timeout=60).output_tokens == 5


def test_a_length_limited_answer_keeps_its_last_token(make_engine, tiny_loaded):
    engine = make_engine()
    ids = prompt_of(tiny_loaded, "hello world")
    expected = reference_greedy(tiny_loaded, ids, 5)
    assert len(expected) == 5 and not set(expected) & tiny_loaded.stop_token_ids
    seen = list(engine.submit(prompt_ids=ids, params=SamplingParams(max_tokens=5)))
    done = seen[-1]
    assert done.reason == "length" and done.output_tokens == 5
    assert done.text == tiny_loaded.tokenizer.decode(expected)
    assert "".join(e.text for e in seen if isinstance(e, Token)) == done.text


def test_a_paced_lane_steps_no_faster_than_its_floor_and_gives_the_same_answer(
        make_engine, tiny_loaded):
    """LaneConfig.min_step_s (how tests stream a tiny model at human speed)
    slows the steps only: the answer is the unpaced one."""
    from engine import LaneConfig, LaneSpec

    with pytest.raises(ValueError):
        LaneConfig(min_step_s=-0.1)
    prompt = prompt_of(tiny_loaded, "hello world, how are you today?")
    engine = make_engine([LaneSpec("cpu", "cpu", "float32", LaneConfig(min_step_s=0.03))])
    handle = engine.submit(prompt_ids=prompt, params=SamplingParams(max_tokens=6))
    handle.result(60)
    stats = engine.lanes["cpu"].stats
    assert stats.steps >= 6 and stats.busy_s >= 0.03 * stats.steps
    assert handle.request.output_ids == reference_greedy(tiny_loaded, prompt, 6)
