"""Damaged quantized tensors are refused at load, naming the tensor (issue
51): Tandem's kernels trust a layer's shapes, so a truncated packed weight,
scales for another group size or biases of another dtype must never reach
them (nor MLX's op, which would answer garbage). Folders written by
mlx-lm's own convert, then damaged the way a bad download or a broken
converter would; the check reads the safetensors headers before anything
is built, and the built model's layers after."""

from __future__ import annotations

import shutil

import pytest

import mlx.core as mx
import mlx.nn as nn

from engine.core.errors import EngineError
from engine.models.loader import load_model
from engine.models.quantized_check import check_quantized
from engine.runtime import qmm

LAYER = "model.layers.0.self_attn.q_proj"


@pytest.fixture(scope="module")
def quantized_dir(tiny_model_dir, tmp_path_factory):
    from mlx_lm import convert

    out = tmp_path_factory.mktemp("tiny-q") / "model"
    convert(str(tiny_model_dir), mlx_path=str(out), quantize=True, q_group_size=32, q_bits=4)
    return out


def damaged(src, tmp_path, change) -> str:
    out = tmp_path / "damaged"
    shutil.copytree(src, out)
    weights = mx.load(str(src / "model.safetensors"))
    change(weights)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    return str(out)


CASES = {
    # Two groups of 32 a row cut to one reads as a group of 64: the biases then disagree.
    "scales one group short": (lambda w: w.update({f"{LAYER}.scales": w[f"{LAYER}.scales"][:, :-1]}),
                               f"{LAYER}.biases"),
    "a packed row one word short": (
        lambda w: w.update({f"{LAYER}.weight": w[f"{LAYER}.weight"][:, :-1]}), f"{LAYER}.scales"),
    "scales for fewer rows": (lambda w: w.update({f"{LAYER}.scales": w[f"{LAYER}.scales"][:-1]}),
                              f"{LAYER}.scales"),
    "biases of another dtype": (
        lambda w: w.update({f"{LAYER}.biases": w[f"{LAYER}.biases"].astype(mx.float16)}),
        f"{LAYER}.biases"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_damaged_tensor_is_refused_by_name(quantized_dir, tmp_path, case):
    change, named = CASES[case]
    with pytest.raises(EngineError) as refused:
        load_model(damaged(quantized_dir, tmp_path, change))
    assert refused.value.kind == "corrupt-model"
    assert f"a quantized tensor is damaged: {named}" in str(refused.value), str(refused.value)


def test_a_truncated_file_is_refused(quantized_dir, tmp_path):
    out = tmp_path / "cut"
    shutil.copytree(quantized_dir, out)
    (out / "model.safetensors").write_bytes(b"\x10\x00\x00")
    with pytest.raises(EngineError, match="truncated"):
        load_model(str(out))


def test_the_undamaged_folder_loads_and_its_layers_take_the_kernels(quantized_dir):
    model = load_model(str(quantized_dir)).model
    check_quantized(model, "ok")  # nothing to say
    assert qmm.install(model) > 0 or qmm.kernels() is None


def test_a_built_layer_that_disagrees_is_refused_and_never_routed(tiny_model_dir):
    """What the files check cannot see (a GGUF, a model built in code): the
    built layers are walked, and the kernels skip a layer they cannot trust."""
    model = load_model(str(tiny_model_dir)).model
    nn.quantize(model, group_size=32, bits=4)
    layer = model.model.layers[0].self_attn.q_proj
    layer.biases = layer.biases.astype(mx.float16)  # scales stay float32
    with pytest.raises(EngineError, match=f"{LAYER}.biases is mlx.core.float16"):
        check_quantized(model, "built")
    qmm.install(model)
    assert type(layer) is nn.QuantizedLinear  # left on MLX's op
