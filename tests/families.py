"""Tiny random models of several mlx-lm model families, saved in Hugging Face
layout (config.json + model.safetensors + tokenizer), for fast real tests.

Each family is built with its own mlx-lm `ModelArgs` / config keys (see
mlx_lm/models/<type>.py) so that `mlx_lm.load(path)` resolves the real
architecture, and so the prompt caches are the family's own:

- plain KVCache: llama, qwen2, qwen3, mistral (mlx-lm remaps it to llama), phi3;
- KVCache + RotatingKVCache (sliding-window layers): gemma3_text, gpt_oss (MoE);
- KVCache + ArraysCache (hybrid convolution / attention): lfm2.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

from tests.tiny_model import build_tokenizer

FAMILIES = ["llama", "qwen2", "qwen3", "mistral", "phi3", "gemma3_text", "gpt_oss", "lfm2"]

HIDDEN = 64
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
MAX_POSITIONS = 512
SLIDING_WINDOW = 16


def _config(name: str, vocab_size: int, eos_id: int, pad_id: int = 0) -> dict:
    """The config.json of a tiny `name`, in that family's own keys."""
    common = {
        "model_type": name,
        "hidden_size": HIDDEN,
        "intermediate_size": HIDDEN * 2,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "vocab_size": vocab_size,
        "max_position_embeddings": MAX_POSITIONS,
        "eos_token_id": eos_id,
        # transformers reads config.json too (AutoConfig, when mlx-lm loads the
        # tokenizer); its family defaults (phi3: pad 32000) would not fit the vocab.
        "pad_token_id": pad_id,
        "torch_dtype": "float32",
    }
    if name in ("llama", "mistral"):
        # mlx-lm maps model_type "mistral" onto its llama module (MODEL_REMAPPING);
        # sliding_window null as in Mistral v0.2+ configs: full attention.
        extra = {"num_hidden_layers": 2, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                 "tie_word_embeddings": name == "llama"}
        if name == "mistral":
            extra["sliding_window"] = None
        return {**common, **extra}
    if name == "qwen2":  # q/k/v projections carry biases
        return {**common, "num_hidden_layers": 2, "rms_norm_eps": 1e-6,
                "rope_theta": 1000000.0, "tie_word_embeddings": True}
    if name == "qwen3":  # q/k norms, explicit head_dim
        return {**common, "num_hidden_layers": 2, "rms_norm_eps": 1e-6, "head_dim": HEAD_DIM,
                "rope_theta": 1000000.0, "tie_word_embeddings": True}
    if name == "phi3":  # fused qkv_proj and gate_up_proj, untied lm_head
        return {**common, "num_hidden_layers": 2, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                "original_max_position_embeddings": MAX_POSITIONS,
                "tie_word_embeddings": False}
    if name == "gemma3_text":
        # Layer i is global (KVCache) when i % pattern == pattern - 1, else
        # sliding (RotatingKVCache of SLIDING_WINDOW): layers 0, 2 sliding; 1, 3 global.
        return {**common, "num_hidden_layers": 4, "head_dim": HEAD_DIM, "rms_norm_eps": 1e-6,
                "query_pre_attn_scalar": HEAD_DIM, "sliding_window": SLIDING_WINDOW,
                "sliding_window_pattern": 2, "rope_theta": 1000000.0,
                "rope_local_base_freq": 10000.0}
    if name == "gpt_oss":  # MoE with attention sinks; alternating sliding / full layers
        return {**common, "num_hidden_layers": 2, "head_dim": HEAD_DIM, "rms_norm_eps": 1e-5,
                "num_local_experts": 4, "num_experts_per_tok": 2,
                "sliding_window": SLIDING_WINDOW, "rope_theta": 150000,
                # Plain RoPE, not the real model's YaRN. mlx-lm reads
                # rope_scaling; transformers (AutoConfig) reads rope_parameters
                # and, without it, assumes YaRN and warns about the context size.
                "rope_scaling": None,
                "rope_parameters": {"rope_type": "default", "rope_theta": 150000.0},
                "layer_types": ["sliding_attention", "full_attention"]}
    if name == "lfm2":  # short-convolution layers (ArraysCache) + attention layers (KVCache)
        return {**common, "num_hidden_layers": 3, "norm_eps": 1e-5, "conv_bias": False,
                "conv_L_cache": 3, "block_dim": HIDDEN, "block_ff_dim": HIDDEN * 2,
                "block_multiple_of": 16, "block_ffn_dim_multiplier": 1.0,
                "block_auto_adjust_ff_dim": False, "rope_theta": 1000000.0,
                "layer_types": ["conv", "full_attention", "conv"],
                "tie_word_embeddings": True}
    raise ValueError(f"Unknown family '{name}'; known: {', '.join(FAMILIES)}")


def _scaled_weights(model, name: str) -> dict[str, mx.array]:
    """The model's weights, scaled like build_tiny_llama's so greedy output varies.

    Default initialisation makes a random model repeat one token forever;
    larger embeddings and projections give varied, context-dependent greedy
    output with well separated logits.
    """
    weights = {}
    for key, value in tree_flatten(model.parameters()):
        if key.endswith("embed_tokens.weight"):
            # Gemma multiplies embeddings by sqrt(hidden_size) and ties its
            # output to them: at 0.5 the token's own embedding swamps the
            # residual stream and greedy decoding repeats the last token.
            scale = 0.25 / HIDDEN ** 0.5 if name == "gemma3_text" else 0.5
            value = mx.random.normal(value.shape) * scale
        elif key.endswith(("proj.weight", "lm_head.weight")) or (
                name == "lfm2" and key.endswith(("w1.weight", "w2.weight", "w3.weight"))):
            value = value * 4
        weights[key] = value
    if name == "gemma3_text":
        # Gemma ties its output to the embedding: the sanitizer drops lm_head
        # when the checkpoint has none, as in real Gemma 3 checkpoints.
        weights.pop("lm_head.weight", None)
    return weights


def _make_model(config: dict):
    from mlx_lm.utils import _get_classes

    model_class, args_class = _get_classes(config)
    return model_class(args_class.from_dict(config))


def build_family(name: str, path: Path, seed: int = 0) -> Path:
    """A random float32 tiny model of mlx-lm family `name` in `path` (HF layout)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(path)
    write_weights(name, path, len(tokenizer), tokenizer.convert_tokens_to_ids("<|im_end|>"),
                  tokenizer.pad_token_id, seed)
    return path


def write_weights(name: str, path: Path, vocab_size: int, eos_id: int, pad_id: int = 0,
                  seed: int = 0, overrides: dict | None = None) -> dict:
    """config.json and random model.safetensors of a tiny `name` in `path` (its
    tokenizer written apart); `overrides` replace config keys. Returns the config."""
    config = _config(name, vocab_size, eos_id, pad_id) | (overrides or {})
    mx.random.seed(seed)
    model = _make_model(config)
    weights = _scaled_weights(model, name)
    mx.save_safetensors(str(path / "model.safetensors"), weights)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return config


def cache_kinds(model) -> list[str]:
    """Sorted class names of the prompt cache mlx-lm makes for `model`."""
    from mlx_lm.models.cache import make_prompt_cache

    return sorted({type(c).__name__ for c in make_prompt_cache(model)})


# {family: sorted cache class names}, from an unsaved model of each family
# (the cache layout depends on the config only, not on the weights).
CACHE_KINDS: dict[str, list[str]] = {
    name: cache_kinds(_make_model(_config(name, vocab_size=400, eos_id=2)))
    for name in FAMILIES
}
