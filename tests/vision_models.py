"""Tiny random vision models built offline from mlx-vlm's own classes, with
tiny PIL-backed processors (transformers' torch-free image processors), for
tests of images in chats (issue 37). Each folder is what a Hub repo holds:
config.json, model.safetensors, the tokenizer, preprocessor_config.json,
processor_config.json and the chat template."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

from tests.tiny_model import build_tokenizer

QWEN_VISION = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>",
               "<|vision_pad|>"]
QWEN_VL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# Qwen's tool format (tests/tool_models.py) before the vision template: the
# tools in a system turn, a call in <tool_call></tool_call>.
QWEN_VL_TOOLS = (
    "{% if tools %}<|im_start|>system\nYou may call functions. <tools>"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\nReturn a call as "
    "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    "</tool_call><|im_end|>\n{% endif %}"
    + QWEN_VL_TEMPLATE.replace(
        "{{ message['content'] }}{% else %}",
        "{{ message['content'] }}{% for call in message.tool_calls or [] %}"
        "{% set tool_call = call.function %}<tool_call>\n{\"name\": \"{{ tool_call.name }}\", "
        "\"arguments\": {{ tool_call.arguments | tojson }}}\n</tool_call>{% endfor %}"
        "{% else %}"))


def _configured(family, config: dict):
    """The family's ModelConfig as mlx-vlm's loader builds it (text and vision
    configs made classes: mlx_vlm.utils.update_module_configs)."""
    from mlx_vlm.utils import update_module_configs

    config = json.loads(json.dumps(config))
    config.setdefault("text_config", {})
    config.setdefault("vision_config", {})
    model_config = family.ModelConfig.from_dict(config)  # (fills config's text_config)
    return update_module_configs(model_config, family, config, ["text", "vision"])


def _save(model, path: Path, config: dict, scale: float = 0.5, tokenizer=None) -> None:
    """Weights with larger embeddings (varied greedy output, as the tiny
    llama's), config.json and a greedy generation config whose eos ids are
    every stop token of the vocabulary (as Qwen's lists <|im_end|> and
    <|endoftext|>): mlx-vlm then stops where Tandem does."""
    weights = dict(tree_flatten(model.parameters()))
    for name in list(weights):
        if name.endswith("embed_tokens.weight"):
            weights[name] = mx.random.normal(weights[name].shape) * scale
        elif "language_model" in name and name.endswith("proj.weight"):
            weights[name] = weights[name] * 4
    mx.save_safetensors(str(path / "model.safetensors"), weights)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    stops = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>",
                                                          "<end_of_utterance>")
             if tokenizer is not None and t in tokenizer.get_vocab()]
    (path / "generation_config.json").write_text(json.dumps(
        {"do_sample": False, "repetition_penalty": 1.0, **({"eos_token_id": stops}
                                                            if stops else {})}))


def build_qwen25_vl(path: Path, seed: int = 0, hidden: int = 64, layers: int = 2,
                    template: str = QWEN_VL_TEMPLATE, tokens: tuple[str, ...] = (),
                    max_pixels: int = 56 * 56, vision: tuple[int, int] = (2, 32)) -> Path:
    """A tiny Qwen2.5-VL: 2 text layers, a 2-block vision tower (patch 14,
    merge 2), M-RoPE; images resized to at most 56x56 (16 patches: 4 image
    tokens). `hidden` / `layers` size its text model (benchmarks/vision.py);
    its M-RoPE sections are Qwen's proportions of the head's dimension.
    `template` and added `tokens`: QWEN_VL_TOOLS and tool_models.TOOL_TOKENS
    give it Qwen's tool calls; `max_pixels` the processor's limit (a real
    checkpoint's is 12.8 MP); `vision` the tower's (depth, width) (a real
    7B's: 32 x 1280)."""
    from tokenizers import AddedToken

    from mlx_vlm.models import qwen2_5_vl

    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(path)
    tokenizer.add_special_tokens({"additional_special_tokens": QWEN_VISION})
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in tokens])
    tokenizer.chat_template = template
    tokenizer.save_pretrained(path)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in QWEN_VISION}
    heads = 4 if hidden <= 256 else hidden // 128
    half = hidden // heads // 2  # M-RoPE sections split half the head: 1/4, 3/8, 3/8
    config = {
        "model_type": "qwen2_5_vl", "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "hidden_size": hidden, "num_hidden_layers": layers, "intermediate_size": hidden * 2,
        "num_attention_heads": heads, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
        "vocab_size": len(tokenizer), "max_position_embeddings": 4096,
        "rope_theta": 1000000.0, "tie_word_embeddings": True,
        "rope_scaling": {"type": "mrope",
                         "mrope_section": [half // 4, 3 * half // 8, 3 * half // 8]},
        "image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "vision_token_id": ids["<|vision_pad|>"],
        "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"),
        "torch_dtype": "float32",
        "vision_config": {
            "model_type": "qwen2_5_vl", "depth": vision[0], "hidden_size": vision[1],
            "intermediate_size": vision[1] * 2, "out_hidden_size": hidden,
            "num_heads": max(2, vision[1] // 64),
            "patch_size": 14, "spatial_patch_size": 14, "spatial_merge_size": 2,
            "temporal_patch_size": 2, "window_size": 56,
            "fullatt_block_indexes": list(range(vision[0] // 4 - 1, vision[0], vision[0] // 4))
            if vision[0] >= 4 else [vision[0] - 1],
            "in_channels": 3, "tokens_per_second": 2},
    }
    mx.random.seed(seed)
    model = qwen2_5_vl.Model(_configured(qwen2_5_vl, config))
    _save(model, path, config, tokenizer=tokenizer)
    # mlx-vlm's own numpy processor reads this (as from a Hub repo), no torch.
    (path / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
        "min_pixels": 28 * 28, "max_pixels": max_pixels, "patch_size": 14,
        "temporal_patch_size": 2, "merge_size": 2,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711]}, indent=2))
    return path


SMOLVLM_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"]
SMOLVLM_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'] is string %}: {{ message['content'] }}"
    "{% else %}{% if message['content'][0]['type'] == 'image' %}:{% else %}: {% endif %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}")


def build_smolvlm(path: Path, seed: int = 0, hidden: int = 64, layers: int = 2) -> Path:
    """A tiny SmolVLM (Idefics3: a SigLIP tower, a pixel-shuffle connector, a
    llama): 2 text layers, 2 vision layers; an image is one 56x56 tile (no
    splitting): 16 patches, 4 image tokens."""
    from mlx_vlm.models import smolvlm

    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(path)
    tokenizer.add_special_tokens({"additional_special_tokens": SMOLVLM_TOKENS})
    tokenizer.chat_template = SMOLVLM_TEMPLATE
    tokenizer.save_pretrained(path)
    config = {
        "model_type": "smolvlm", "architectures": ["SmolVLMForConditionalGeneration"],
        "image_token_id": tokenizer.convert_tokens_to_ids("<image>"), "scale_factor": 2,
        "vocab_size": len(tokenizer), "torch_dtype": "float32",
        "eos_token_id": tokenizer.convert_tokens_to_ids("<end_of_utterance>"),
        "text_config": {
            "model_type": "llama", "hidden_size": hidden, "intermediate_size": hidden * 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": layers,
            "rms_norm_eps": 1e-5, "vocab_size": len(tokenizer), "rope_theta": 10000.0,
            "max_position_embeddings": 4096, "tie_word_embeddings": False},
        "vision_config": {
            "model_type": "smolvlm_vision", "hidden_size": 32, "intermediate_size": 64,
            "num_attention_heads": 2, "num_hidden_layers": 2, "patch_size": 14,
            "image_size": 56, "num_channels": 3, "layer_norm_eps": 1e-6},
    }
    mx.random.seed(seed)
    model = smolvlm.Model(_configured(smolvlm, config))
    _save(model, path, config, tokenizer=tokenizer)
    (path / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "SmolVLMImageProcessor", "processor_class": "SmolVLMProcessor",
        "do_image_splitting": False, "do_resize": True, "do_rescale": True,
        "do_normalize": True, "do_pad": True, "do_convert_rgb": True,
        "size": {"longest_edge": 56}, "max_image_size": {"longest_edge": 56},
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "resample": 1,
        "rescale_factor": 1 / 255}, indent=2))
    (path / "processor_config.json").write_text(json.dumps({
        "processor_class": "SmolVLMProcessor", "image_seq_len": 4}, indent=2))
    return path
