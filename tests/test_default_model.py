"""End to end on the bundled SmolLM2-135M GGUF (real weights, real tokenizer)."""

import pytest

from engine import SamplingParams

pytestmark = pytest.mark.slow

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def test_chat_answer_stops_at_chat_end_token(default_engine):
    handle = default_engine.submit(QUESTION, SamplingParams(max_tokens=64))
    done = handle.result(120)
    assert done.reason == "stop"
    assert handle.request.output_ids[-1] == default_engine.tokenizer.convert_tokens_to_ids(
        "<|im_end|>")
    assert done.text.strip()
    assert "<|im_end|>" not in done.text
    assert "Paris" in done.text


def test_greedy_is_deterministic_and_warm_turn_reuses_prefix(default_engine):
    params = SamplingParams(max_tokens=32)
    first = default_engine.generate(QUESTION, params, timeout=120)
    second = default_engine.generate(QUESTION, params, timeout=120)
    assert first.text == second.text
    assert second.cached_tokens > 0
    follow = QUESTION + [{"role": "assistant", "content": first.text},
                         {"role": "user", "content": "And of Germany?"}]
    warm = default_engine.generate(follow, params, timeout=120)
    assert warm.cached_tokens >= first.prompt_tokens - default_engine.prefix_cache.block_size
    assert warm.text.strip()


def test_gguf_tokenizer_round_trips_text(default_engine):
    tok = default_engine.tokenizer
    text = "Hello, world! 123 café 🙂\n  indented"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    ids = default_engine.render(QUESTION)
    assert tok.decode(ids).startswith("<|im_start|>system\n")
    assert tok.convert_ids_to_tokens(ids[0]) == "<|im_start|>"


def test_two_cpu_lanes_share_one_float32_copy_of_the_default_model():
    """The memory plan on the real 4-bit GGUF: the probe measures float32
    faster on this CPU, so the first lane converts in place and the second
    reads the same arrays (no second copy); the plan says so."""
    from engine import Engine, LaneSpec
    from engine.runtime.weights import dense_faster_on_cpu

    engine = Engine.load("default", lanes=[LaneSpec("gpu", "cpu", acts_as="gpu"),
                                           LaneSpec("cpu", "cpu")])
    try:
        plan = engine.memory_plan
        gpu, cpu = plan.lane("gpu"), plan.lane("cpu")
        assert engine.lanes["gpu"].model is engine.lanes["cpu"].model
        assert cpu.weight_format == "shared" and cpu.weight_bytes == 0
        if gpu.weight_format == "float32":  # what the probe measured on this machine
            assert dense_faster_on_cpu is not None and "probe" in gpu.reason
        assert plan.kv_bytes_per_token == 30 * 3 * 64 * 2 * (4 if gpu.weight_format ==
                                                             "float32" else 2)
        assert plan.planned_bytes <= plan.budget_bytes
        done = engine.generate(QUESTION, SamplingParams(max_tokens=16), timeout=120)
        assert done.output_tokens > 0
    finally:
        engine.close()
