"""The memory planner (engine/core/memory.py): plain Python, no MLX, fast."""

import subprocess
import sys
from pathlib import Path

import pytest

from engine.core.memory import (LaneRequest, ModelShape, format_bytes, lane_request,
                                plan_memory, shape_from_config)

ROOT = Path(__file__).resolve().parents[1]
GIB = 1 << 30

LLAMA3_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
             "max_position_embeddings": 8192, "tie_word_embeddings": False,
             "torch_dtype": "bfloat16"}
LLAMA3_8B_4BIT = {**LLAMA3_8B, "quantization": {"bits": 4, "group_size": 64}}
QWEN25_7B_4BIT = {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                  "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                  "max_position_embeddings": 32768, "tie_word_embeddings": False,
                  "attention_bias": True, "quantization": {"bits": 4, "group_size": 64}}
SMOLLM2_135M = {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
                "max_position_embeddings": 8192, "tie_word_embeddings": True,
                "quantization": {"bits": 8, "group_size": 32}}

GPU = LaneRequest("gpu", "gpu")


def cpu(faster=True):
    return LaneRequest("cpu", "cpu", "float32", faster)


def test_importing_the_planner_does_not_import_mlx():
    code = ("import sys, engine.core.memory; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm')); "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_kv_bytes_per_token():
    assert shape_from_config(LLAMA3_8B).kv_bytes_per_token == 131072
    smol = shape_from_config(SMOLLM2_135M)
    assert (smol.num_layers, smol.num_kv_heads, smol.head_dim) == (30, 3, 64)
    assert smol.kv_bytes_per_token == 30 * 3 * 64 * 2 * 2
    assert shape_from_config(LLAMA3_8B, kv_dtype_bytes=4).kv_bytes_per_token == 2 * 131072


def test_shape_from_config_estimates_parameters_and_quantized_bytes():
    dense = shape_from_config(LLAMA3_8B)
    assert abs(dense.dense_params - 8.03e9) / 8.03e9 < 0.05
    assert not dense.is_quantized and dense.weight_format == "bfloat16"
    assert dense.weight_bytes == dense.dense_params * 2
    assert dense.context_length == 8192
    quantized = shape_from_config(LLAMA3_8B_4BIT)
    assert quantized.is_quantized and quantized.weight_format == "quantized"
    assert abs(quantized.weight_bytes - 4.5e9) / 4.5e9 < 0.15
    # 4 bits a weight plus a float16 scale and bias per group of 64
    assert quantized.weight_bytes > quantized.dense_params * (4 / 8 + 4 / 64) * 0.99
    assert shape_from_config(LLAMA3_8B_4BIT, weight_bytes=123).weight_bytes == 123
    smol = shape_from_config(SMOLLM2_135M)
    assert abs(smol.dense_params - 134.5e6) / 134.5e6 < 0.05  # tied embeddings: one copy


@pytest.mark.parametrize("config", [LLAMA3_8B_4BIT, QWEN25_7B_4BIT])
def test_no_float32_copy_of_a_7b_model_on_16_gib(config):
    shape = shape_from_config(config)
    plan = plan_memory(shape, [GPU, cpu()], 16 * GIB)
    gpu, cpu_lane = plan.lane("gpu"), plan.lane("cpu")
    assert shape.dense_bytes(4) > 28e9
    assert cpu_lane.enabled and cpu_lane.weight_format == "shared" and cpu_lane.weight_bytes == 0
    assert "does not fit" in cpu_lane.reason and "float32" in cpu_lane.reason
    assert gpu.enabled and gpu.weight_format == "quantized"
    assert gpu.kv_budget_bytes > 0 and cpu_lane.kv_budget_bytes > 0
    assert gpu.kv_budget_bytes == pytest.approx(2 * cpu_lane.kv_budget_bytes, abs=2)
    assert plan.shared_weight_bytes == shape.weight_bytes
    assert plan.prefix_cache_bytes > 0
    assert plan.planned_bytes <= plan.budget_bytes


@pytest.mark.parametrize("config", [LLAMA3_8B_4BIT, QWEN25_7B_4BIT])
@pytest.mark.parametrize("unified", [True, False])
def test_a_7b_models_cpu_lane_keeps_the_quantized_size_on_24_gib(config, unified):
    """Issue 51: a CPU lane on Tandem's kernels (or MLX's op) asks for the
    weights as loaded. Unified memory (Apple silicon): the GPU lane's arrays,
    no byte more; separate memories (a CUDA machine): one copy of its own,
    at the quantized size, never the float32 one (28-32 GB)."""
    shape = shape_from_config(config)
    for matmul in ("tandem", "mlx"):
        lanes = [lane_request("gpu", "gpu", True, None),
                 lane_request("cpu", "cpu", True, matmul)]
        plan = plan_memory(shape, lanes, 24 * GIB, unified_memory=unified)
        gpu, cpu_lane = plan.lane("gpu"), plan.lane("cpu")
        assert gpu.enabled and cpu_lane.enabled
        assert shape.weight_bytes < 6e9 < 28e9 < shape.dense_bytes(4)
        if unified:
            assert (cpu_lane.weight_format, cpu_lane.weight_bytes) == ("shared", 0)
        else:
            assert (cpu_lane.weight_format, cpu_lane.weight_bytes) == ("quantized",
                                                                       shape.weight_bytes)
        cpu_bytes = cpu_lane.weight_bytes or plan.shared_weight_bytes
        assert cpu_bytes <= 1.3 * shape.weight_bytes  # the bound on the lane's weights
        assert plan.planned_bytes <= plan.budget_bytes
    # Only a probe that chose a float32 copy (no kernels here) asks for one.
    assert lane_request("cpu", "cpu", True, "float32").own_format == "float32"
    assert lane_request("cpu", "cpu", False, "float32").own_format is None


def test_small_model_gets_a_float32_copy_only_when_measured_faster():
    shape = shape_from_config(SMOLLM2_135M)
    faster = plan_memory(shape, [GPU, cpu(True)], 24 * GIB).lane("cpu")
    assert (faster.enabled, faster.weight_format) == (True, "float32")
    assert faster.weight_bytes == shape.dense_bytes(4)
    slower = plan_memory(shape, [GPU, cpu(False)], 24 * GIB).lane("cpu")
    assert (slower.weight_format, slower.weight_bytes) == ("shared", 0)
    assert "no faster" in slower.reason
    unmeasured = plan_memory(shape, [GPU, cpu(None)], 24 * GIB).lane("cpu")
    assert (unmeasured.weight_format, unmeasured.weight_bytes) == ("shared", 0)
    assert "not measured" in unmeasured.reason


def test_cpu_only_machine_converts_in_place():
    shape = shape_from_config(SMOLLM2_135M)
    plan = plan_memory(shape, [cpu()], 8 * GIB, unified_memory=False)
    only = plan.lane("cpu")
    assert plan.shared_weight_bytes == shape.dense_bytes(4)
    assert (only.enabled, only.weight_format, only.weight_bytes) == (True, "float32", 0)
    assert only.kv_budget_bytes > 0
    kept = plan_memory(shape, [cpu(None)], 8 * GIB)
    assert kept.shared_weight_bytes == shape.weight_bytes
    assert kept.lane("cpu").weight_format == "quantized"
    assert "not measured" in kept.lane("cpu").reason


def test_primary_keeps_loaded_format_when_another_lane_reads_it():
    shape = shape_from_config(SMOLLM2_135M)
    plan = plan_memory(shape, [cpu(), GPU], 8 * GIB)
    assert plan.lanes[0].weight_format == "quantized"
    assert "GPU" in plan.lanes[0].reason
    assert plan.lane("gpu").weight_format == "shared"


def test_primary_conversion_must_fit():
    shape = shape_from_config(LLAMA3_8B_4BIT)
    plan = plan_memory(shape, [cpu()], 16 * GIB)
    assert plan.shared_weight_bytes == shape.weight_bytes
    assert plan.lanes[0].weight_format == "quantized" and "does not fit" in plan.lanes[0].reason


def test_discrete_memory_without_room_for_a_cpu_copy_turns_the_cpu_lane_off():
    shape = shape_from_config(LLAMA3_8B_4BIT)
    plan = plan_memory(shape, [GPU, cpu()], 8 * GIB, unified_memory=False)
    assert plan.lane("gpu").enabled and plan.lane("gpu").kv_budget_bytes > 0
    off = plan.lane("cpu")
    assert not off.enabled and off.kv_budget_bytes == 0 and off.weight_bytes == 0
    assert "off" in off.reason.lower() and format_bytes(shape.weight_bytes) in off.reason
    # With room, the CPU lane holds a copy in the loaded format (float32 is too big).
    roomy = plan_memory(shape, [GPU, cpu()], 24 * GIB, unified_memory=False).lane("cpu")
    assert roomy.enabled and roomy.weight_format == "quantized"
    assert roomy.weight_bytes == shape.weight_bytes


def test_a_lane_that_would_get_too_little_kv_is_off():
    shape = shape_from_config(LLAMA3_8B_4BIT)
    budget = shape.weight_bytes + (512 << 20) + (600 << 20)
    plan = plan_memory(shape, [GPU, LaneRequest("cpu", "cpu")], budget)
    off, gpu = plan.lane("cpu"), plan.lane("gpu")
    assert not off.enabled and off.kv_budget_bytes == 0
    assert "KV" in off.reason
    assert gpu.enabled and gpu.kv_budget_bytes >= 2048 * shape.kv_bytes_per_token
    assert plan.planned_bytes <= budget


def test_primary_stays_on_when_memory_is_very_tight_or_weights_exceed_budget():
    shape = shape_from_config(LLAMA3_8B_4BIT)
    tight = plan_memory(shape, [GPU, cpu()], shape.weight_bytes + (600 << 20))
    assert tight.lane("gpu").enabled and not tight.lane("cpu").enabled
    assert "very tight" in tight.lane("gpu").reason
    assert tight.prefix_cache_bytes == 0  # the one lane takes everything left
    assert tight.lane("gpu").kv_budget_bytes == 600 * 2**20 - (512 << 20)
    assert tight.planned_bytes <= tight.budget_bytes
    over = plan_memory(shape, [GPU], shape.weight_bytes // 2)
    assert over.lane("gpu").enabled and "exceed" in over.lane("gpu").reason


@pytest.mark.parametrize("unified", [True, False])
def test_plan_never_exceeds_the_budget_when_the_weights_fit(unified):
    shapes = [shape_from_config(c) for c in (SMOLLM2_135M, LLAMA3_8B_4BIT, QWEN25_7B_4BIT,
                                             LLAMA3_8B)]
    lane_sets = [[GPU], [GPU, cpu()], [GPU, cpu(False)], [cpu()], [cpu(), GPU],
                 [GPU, cpu(), LaneRequest("cpu2", "cpu", "float32", True)]]
    for shape in shapes:
        min_kv = 2048 * shape.kv_bytes_per_token
        for gib in (0.25, 1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128):
            budget = int(gib * GIB)
            for lanes in lane_sets:
                plan = plan_memory(shape, lanes, budget, unified_memory=unified)
                assert plan.lanes[0].enabled
                if shape.weight_bytes <= budget:
                    assert plan.planned_bytes <= budget, (shape, lanes, gib)
                for lane in plan.lanes[1:]:
                    assert not lane.enabled or lane.kv_budget_bytes >= min_kv


def test_describe_says_what_a_chat_costs_and_that_kv_is_a_limit():
    shape = shape_from_config(LLAMA3_8B_4BIT)
    plan = plan_memory(shape, [GPU, cpu()], 16 * GIB)
    lines = plan.describe()
    text = "\n".join(lines)
    assert lines[0].startswith("Weights ") and "shared by GPU and CPU" in lines[0]
    context = shape.context_length
    assert f"128.0 KiB per token: a full {context:,}-token chat takes " in text
    full = plan.lane("gpu").kv_budget_bytes // (context * 128 * 1024)
    assert f"(~{full:,} full chats)" in text
    assert lines[-1].startswith("Memory is taken as chats grow, never reserved: at most ")
    assert lines[-1].endswith("of the 16.0 GiB free at load")
    assert "Planned" not in text and "Budget" not in text


def test_kv_is_planned_for_what_the_lanes_slots_can_hold():
    """The default model (8,192-token context) on a roomy machine: KV beyond
    slots x context is never used, so it is not planned (nor a prefix cache
    larger than all of it)."""
    shape = shape_from_config(SMOLLM2_135M)
    roomy = plan_memory(shape, [LaneRequest("gpu", "gpu", max_sequences=4),
                                LaneRequest("cpu", "cpu", max_sequences=2)], 64 * GIB)
    full = shape.context_length * shape.kv_bytes_per_token
    assert roomy.lane("gpu").kv_budget_bytes == 4 * full
    assert roomy.lane("cpu").kv_budget_bytes == 2 * full
    assert roomy.prefix_cache_bytes == 6 * full
    assert roomy.planned_bytes < 8 * GIB and "(~4 full chats)" in "\n".join(roomy.describe())
    unbounded = plan_memory(shape, [GPU, cpu()], 64 * GIB)
    assert unbounded.lane("gpu").kv_budget_bytes > 40 * full


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(300 << 20) == "300.0 MiB"
    assert format_bytes(16 * GIB) == "16.0 GiB"


def test_lane_names_must_be_unique():
    with pytest.raises(ValueError):
        plan_memory(shape_from_config(SMOLLM2_135M), [GPU, GPU], 8 * GIB)


def test_model_shape_is_frozen():
    shape = ModelShape(2, 1, 4, 2, 100, 50, 128)
    with pytest.raises(AttributeError):
        shape.num_layers = 3  # type: ignore[misc]
    assert shape.dense_bytes(4) == 200 and shape.weight_format == "quantized"
    dense = ModelShape(2, 1, 4, 2, 400, 100, 128, is_quantized=False)
    assert dense.weight_format == "shared"  # dtype unknown: the arrays as loaded
    assert plan_memory(dense, [GPU], GIB).lanes[0].weight_format == "shared"
