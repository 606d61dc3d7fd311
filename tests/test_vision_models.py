"""The tiny vision models the image tests use (tests/vision_models.py),
built offline from mlx-vlm's own classes with torch-free processors: each
loads through mlx-vlm, turns an image into its image tokens, and answers
differently for a different image of the same size (so that prefix-cache
hits and misses on images can be told apart)."""

from __future__ import annotations

import pytest
from PIL import Image

from tests.vision_models import build_qwen25_vl, build_smolvlm


@pytest.fixture(scope="module", params=["qwen2_5_vl", "smolvlm"])
def vision_model(request, tmp_path_factory):
    build = {"qwen2_5_vl": build_qwen25_vl, "smolvlm": build_smolvlm}[request.param]
    return request.param, build(tmp_path_factory.mktemp(request.param) / "model")


def test_a_tiny_vision_model_reads_its_image(vision_model):
    from mlx_vlm import generate
    from mlx_vlm.utils import load

    family, path = vision_model
    model, processor = load(str(path))
    assert model.config.model_type == family
    messages = [{"role": "user", "content": [{"type": "image"},
                                             {"type": "text", "text": "What is it?"}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True,
                                           tokenize=False)
    red, green = Image.new("RGB", (64, 48), (200, 30, 30)), Image.new("RGB", (64, 48),
                                                                      (20, 200, 30))
    inputs = processor(text=[prompt], images=[red], return_tensors="np")
    image_tokens = int((inputs["input_ids"] == model.config.image_token_id).sum())
    assert image_tokens == 4  # 16 patches, merged 2x2
    answers = [generate(model, processor, prompt, image=[image], max_tokens=8,
                        temperature=0.0, verbose=False).text for image in (red, green, red)]
    assert answers[0] == answers[2] != answers[1]


def test_the_model_library_marks_the_vision_models_it_serves(vision_model, tiny_model_dir):
    from engine.models.catalog import describe_folder

    family, path = vision_model
    entry = describe_folder(path)
    assert entry.problem is None and entry.family == family and entry.reads_images
    assert not describe_folder(tiny_model_dir).reads_images  # a text model


def _sparse_folder(path, config: dict, tensors: dict, size: int):
    """A model folder with `config` and one safetensors file whose header
    declares `tensors` ({name: (dtype, shape)}), sparse to `size` bytes."""
    import json
    import struct

    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    header = {name: {"dtype": dtype, "shape": shape, "data_offsets": [0, 0]}
              for name, (dtype, shape) in tensors.items()}
    encoded = json.dumps(header).encode()
    with open(path / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(encoded)) + encoded)
        f.truncate(size)  # sparse: no disk is used
    return path


QWEN25_VL_7B_4BIT = {  # mlx-community/Qwen2.5-VL-7B-Instruct-4bit's config (the fields read)
    "model_type": "qwen2_5_vl", "hidden_size": 3584, "num_hidden_layers": 28,
    "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944,
    "vocab_size": 152064, "max_position_embeddings": 128000, "tie_word_embeddings": False,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "quantization": {"group_size": 64, "bits": 4}, "torch_dtype": "bfloat16",
    "vision_config": {"depth": 32, "hidden_size": 1280, "out_hidden_size": 3584}}


@pytest.mark.parametrize("budget_gib, has_gpu, verdict", [
    (16, True, "runs hybrid"), (16, False, "runs CPU-only"), (4, True, "does not fit")])
def test_a_real_sized_vision_model_is_planned_in_bytes(tmp_path, budget_gib, has_gpu, verdict):
    """Qwen2.5-VL-7B at 4 bits (5.6 GB on disk, its vision tower in
    bfloat16 among them) on a 16 GiB and a 4 GiB machine: the library plans
    the whole file's bytes and Qwen's KV (28 layers x 4 KV heads x 128 x 2 x
    2 bytes = 56 KiB a token), from a sparse file with a real header."""
    from engine.models.catalog import describe_folder, judge

    gib = 2**30
    tensors = {
        "language_model.model.layers.0.mlp.down_proj.weight": ("U32", [3584, 18944 // 8]),
        "language_model.model.layers.0.mlp.down_proj.scales": ("BF16", [3584, 18944 // 64]),
        "vision_tower.blocks.0.attn.qkv.weight": ("BF16", [3840, 1280]),
    }
    path = _sparse_folder(tmp_path / "qwen-vl-7b", QWEN25_VL_7B_4BIT, tensors,
                          int(5.64 * 10**9))
    entry = describe_folder(path)
    assert entry.problem is None and entry.reads_images and entry.family == "qwen2_5_vl"
    assert entry.quantization == "4-bit" and entry.file_bytes == int(5.64 * 10**9)
    assert entry.shape.kv_bytes_per_token == 28 * 4 * 128 * 2 * 2
    assert entry.shape.weight_bytes == entry.file_bytes  # the vision tower's bytes counted
    judge(entry, budget_gib * gib, has_gpu)
    assert entry.verdict == verdict, entry.verdict_detail
