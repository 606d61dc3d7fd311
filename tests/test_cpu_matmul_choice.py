"""What a CPU lane's quantized layers run (engine/runtime/cpu_matmul.py,
issue 51): chosen at load by timing the model's own largest layer, shown in
the memory plan; the plan gives a float32 copy only where that probe chose
one, which it never does where Tandem's kernels run. Real MLX products on a
tiny llama quantized by mlx-lm's own convert (4-bit, groups of 32)."""

from __future__ import annotations

import pytest

import mlx.nn as nn

from engine.core.laneconfig import LaneSpec
from engine.models.loader import load_model
from engine.runtime import cpu_matmul, qmm
from engine.runtime.placement import plan_lanes

KERNELS = qmm.kernels() is not None


@pytest.fixture(scope="module")
def quantized_dir(tiny_model_dir, tmp_path_factory):
    from mlx_lm import convert

    out = tmp_path_factory.mktemp("tiny-4bit") / "model"
    convert(str(tiny_model_dir), mlx_path=str(out), quantize=True, q_group_size=32, q_bits=4)
    return out


def routed(model) -> int:
    return sum(type(m).__name__ in ("_KernelLinear", "_KernelEmbedding", "PackedLinear",
                                    "PackedEmbedding")
               for _, m in model.named_modules())


@pytest.mark.skipif(not KERNELS, reason=f"kernels not built: {qmm.status()[1]}")
def test_the_faster_of_the_kernels_and_mlxs_op_is_chosen_by_timing(quantized_dir):
    model = load_model(str(quantized_dir)).model
    choice = cpu_matmul.choose(model)
    assert set(choice.ms) == {"tandem", "mlx"}  # a float32 copy is not weighed
    clearly = choice.ms["mlx"] * cpu_matmul.MLX_MARGIN < choice.ms["tandem"]
    assert choice.path == ("mlx" if clearly else "tandem")
    assert all(t > 0 for t in choice.ms.values())
    assert "Tandem's kernels" in choice.why and "MLX's op" in choice.why and " ms" in choice.why


def test_without_the_kernels_a_float32_copy_is_weighed_against_mlxs_op(quantized_dir,
                                                                       monkeypatch):
    monkeypatch.setattr(qmm, "kernels", lambda: None)
    model = load_model(str(quantized_dir)).model
    choice = cpu_matmul.choose(model)
    assert set(choice.ms) == {"mlx", "float32"}
    float32_wins = choice.ms["float32"] < choice.ms["mlx"] * cpu_matmul.FLOAT32_MARGIN
    assert choice.path == ("float32" if float32_wins else "mlx")
    assert "Tandem's kernels are not used" in choice.why


def test_a_format_the_kernels_do_not_take_and_weights_not_quantized(tiny_model_dir):
    model = load_model(str(tiny_model_dir)).model
    assert cpu_matmul.choose(model) is None  # float weights: nothing to choose
    nn.quantize(model, group_size=32, bits=3)
    choice = cpu_matmul.choose(model)
    assert choice.path in ("mlx", "float32") and "tandem" not in choice.ms
    assert "do not take 3-bit groups of 32" in choice.why or not KERNELS


@pytest.mark.parametrize("path", ["tandem", "mlx", "float32"])
def test_tandem_cpu_matmul_forces_a_path_and_the_plan_follows(quantized_dir, monkeypatch, path):
    monkeypatch.setenv("TANDEM_CPU_MATMUL", path)
    loaded = load_model(str(quantized_dir))
    as_loaded = loaded_bytes(loaded)
    plan, models = plan_lanes(loaded, [LaneSpec("cpu", "cpu"), LaneSpec("cpu2", "cpu")])
    lane = plan.lane("cpu")
    assert "forced" in plan.cpu_matmul_why
    assert models["cpu"] is models["cpu2"]  # one set of weights for both lanes
    if path == "float32":
        assert lane.weight_format == "float32" and plan.cpu_matmul == "float32"
        assert plan.matmul("cpu2") == "a float32 copy"
    else:
        assert lane.weight_format == "quantized"
        assert plan.shared_weight_bytes == as_loaded
        # Packed for the kernels (two CPU lanes, no GPU one): the same bytes
        # but for the zero columns that pad a layer to a multiple of 8.
        assert as_loaded <= loaded_bytes(loaded) <= as_loaded * 1.01
    if path == "tandem" and KERNELS:
        assert plan.cpu_matmul == "tandem" and routed(models["cpu"]) > 0
        assert plan.matmul("cpu") == "Tandem's kernels"
    elif path == "tandem":  # forced, but not built here: MLX's op, and why
        assert plan.cpu_matmul == "mlx" and "not used" in plan.cpu_matmul_why
    if path == "mlx":
        assert plan.cpu_matmul == "mlx" and routed(models["cpu"]) == 0
        assert plan.matmul("cpu") == "MLX's op"


def test_the_default_plan_keeps_the_quantized_weights_and_says_what_runs(quantized_dir):
    loaded = load_model(str(quantized_dir))
    plan, models = plan_lanes(loaded, [LaneSpec("cpu", "cpu")])
    lines = "\n".join(plan.describe())
    if KERNELS:
        assert plan.cpu_matmul in ("tandem", "mlx") and "chosen by timing" in plan.cpu_matmul_why
        assert plan.lane("cpu").weight_format == "quantized"
        assert (routed(models["cpu"]) > 0) == (plan.cpu_matmul == "tandem")
    assert f"CPU: {plan.lane('cpu').weight_format} weights, {plan.matmul('cpu')};" in lines


def test_a_float32_copy_that_does_not_fit_leaves_mlxs_op(quantized_dir, monkeypatch):
    """The probe's float32 choice meets the plan: too little room, so the
    lane keeps the quantized weights, and the plan says MLX's op runs them."""
    monkeypatch.setenv("TANDEM_CPU_MATMUL", "float32")
    loaded = load_model(str(quantized_dir))
    shape_bytes = loaded_bytes(loaded)
    plan, _ = plan_lanes(loaded, [LaneSpec("cpu", "cpu")], budget_bytes=shape_bytes + (1 << 20))
    assert plan.lane("cpu").weight_format == "quantized"
    assert plan.cpu_matmul == "mlx" and "has no room" in plan.cpu_matmul_why


def loaded_bytes(loaded) -> int:
    from engine.runtime.weights import model_shape

    return model_shape(loaded.model, loaded.context_length).weight_bytes
