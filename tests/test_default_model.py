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


def test_two_cpu_lanes_share_the_default_models_quantized_weights():
    """The memory plan on the real 4-bit GGUF (issue 51): no float32 copy; the
    two CPU lanes read the same quantized arrays, through Tandem's kernels
    where they are built (the probe measures them against MLX's op: many
    times faster on any x86 CPU), and the plan says so."""
    from engine import Engine, LaneSpec
    from engine.runtime import qmm

    engine = Engine.load("default", lanes=[LaneSpec("gpu", "cpu", acts_as="gpu"),
                                           LaneSpec("cpu", "cpu")])
    try:
        plan = engine.memory_plan
        gpu, cpu = plan.lane("gpu"), plan.lane("cpu")
        assert engine.lanes["gpu"].model is engine.lanes["cpu"].model
        assert cpu.weight_format == "shared" and cpu.weight_bytes == 0
        assert gpu.weight_format == "quantized"
        assert plan.kv_bytes_per_token == 30 * 3 * 64 * 2 * 4  # float32 KV: the loader's dtype
        if qmm.kernels() is not None:
            assert plan.cpu_matmul == "tandem", plan.cpu_matmul_why
            assert "chosen by timing at load" in plan.cpu_matmul_why
            # Both lanes run on the CPU: on x86 the arrays take the packed layout.
            kinds = (("PackedLinear", "PackedEmbedding") if qmm.kernels().isa() in
                     ("avx2", "avx512vnni") else ("_KernelLinear", "_KernelEmbedding"))
            routed = [m for _, m in engine.lanes["cpu"].model.named_modules()
                      if type(m).__name__ in kinds]
            assert len(routed) == 30 * 7 + 1  # every projection and the tied head
            assert "CPU: shared weights, Tandem's kernels;" in "\n".join(plan.describe())
        else:
            assert plan.cpu_matmul in ("mlx", "float32"), plan.cpu_matmul_why
        assert plan.planned_bytes <= plan.budget_bytes
        done = engine.generate(QUESTION, SamplingParams(max_tokens=16), timeout=120)
        assert done.output_tokens > 0
    finally:
        engine.close()
