"""Build an mlx-lm model and a fast tokenizer from a GGUF file.

A file whose tensors are all Q4_0/Q4_1/Q8_0/F32/F16 is read by `mx.load`, which
turns the quantized ones into MLX quantized arrays (weight, scales, biases;
group size 32) and returns the file's metadata. Any other supported type (the
K-quants Q4_K/Q5_K/Q6_K, Q5_0, Q5_1, BF16) is read tensor by tensor by
engine/models/gguf/tensors.py into the same kind of arrays (4, 5 or 8 bits, group size
32), with the metadata from engine/models/gguf/meta.py: `mx.load` would dequantize
K-quants to a float16 copy of the whole model. Transformers' own GGUF reader
needs torch, which Tandem does not ship, so the tokenizer is rebuilt from the
GGUF vocabulary and merges with the `tokenizers` library
(engine/models/gguf/tokenizer.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from ...core.errors import EngineError
from ..config_check import check_config, check_fits
from .values import plain, plain_metadata

GGUF_GROUP_SIZE = 32

# GGUF tensor names -> mlx-lm (Hugging Face) names.
_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q_norm": "self_attn.q_norm",  # qwen3
    "attn_k_norm": "self_attn.k_norm",
}
_TOP_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
# Per architecture, names that differ from the table above.
_ARCH_LAYER_NAMES = {
    "phi3": {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"},
    "gemma3": {"post_attention_norm": "post_attention_layernorm",
               "ffn_norm": "pre_feedforward_layernorm",
               "post_ffw_norm": "post_feedforward_layernorm"},
}
# GGUF architecture -> mlx-lm model type (mistral's GGUFs use "llama").
_MODEL_TYPES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "phi3": "phi3",
                "gemma3": "gemma3_text"}
SUPPORTED_ARCHITECTURES = tuple(_MODEL_TYPES)

@dataclass(slots=True)
class GGUFContents:
    weights: dict[str, mx.array]
    metadata: dict[str, Any]


def read_gguf(path: Path) -> GGUFContents:
    """Read a GGUF file, turning any reader failure into an EngineError."""
    # mx.load segfaults on a damaged file, so its structure is checked first
    # (unsupported tensor types are refused there, with the list of those that
    # work). Imported here: the gguf package takes ~0.15 s to import.
    from .check import validate_gguf
    from .tensors import MX_LOAD_TYPES

    infos = validate_gguf(path)
    # The shape and the size are checked before any tensor is read: a header
    # claiming a billion layers must not allocate anything.
    from .meta import read_metadata

    model_config(read_metadata(path))
    check_fits(sum(info.nbytes for info in infos), path.name)
    try:
        if all(info.type in MX_LOAD_TYPES for info in infos):
            weights, metadata = mx.load(str(path), return_metadata=True)
            metadata = plain_metadata(metadata)  # its numbers are MLX arrays
        else:  # tensor by tensor: never a dense copy of the whole model
            from .tensors import read_tensors

            metadata = read_metadata(path)
            weights = read_tensors(path, infos)
    except MemoryError:
        raise
    except Exception as e:  # MLX raises ValueError/RuntimeError with terse messages
        raise EngineError(
            f"The model file {path.name} is corrupt or truncated. Detail: {e}",
            "corrupt-model",
        ) from e
    return GGUFContents(weights, metadata)


def _scalar(metadata: dict[str, Any], key: str, default: Any = None) -> Any:
    return plain(metadata.get(key, default))


def _int(metadata: dict[str, Any], key: str, default: int) -> int:
    value = _scalar(metadata, key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise EngineError(f"GGUF metadata '{key}' is {value!r}, not a whole number.",
                          "corrupt-model")
    return value


# mlx-lm config names -> the GGUF keys they come from (after "<arch>.")
_CONFIG_KEYS = {"num_hidden_layers": "block_count", "hidden_size": "embedding_length",
                "num_attention_heads": "attention.head_count",
                "num_key_value_heads": "attention.head_count_kv",
                "intermediate_size": "feed_forward_length",
                "max_position_embeddings": "context_length", "head_dim": "attention.key_length",
                "rms_norm_eps": "attention.layer_norm_rms_epsilon",
                "rope_theta": "rope.freq_base", "vocab_size": "vocab_size"}


def model_config(metadata: dict[str, Any]) -> dict[str, Any]:
    """An mlx-lm config dict for the GGUF's architecture."""
    arch = _architecture(metadata)
    config = _shape_config(metadata, arch)
    _check_shape(config, arch)
    if arch == "gemma3":
        # llama.cpp keeps these fixed for Gemma 3 rather than in the metadata:
        # every 6th layer global, local RoPE base 10k, and the query scale of
        # the head size (of hidden / heads for the 62-layer 27B).
        config["sliding_window"] = _int(metadata, "gemma3.attention.sliding_window", 512)
        config["sliding_window_pattern"] = _int(
            metadata, "gemma3.attention.sliding_window_pattern", 6)
        config["rope_local_base_freq"] = 10000.0
        config["query_pre_attn_scalar"] = (
            config["hidden_size"] // config["num_attention_heads"]
            if config["num_hidden_layers"] == 62 else config["head_dim"])
    if arch == "phi3":
        config["original_max_position_embeddings"] = _int(
            metadata, "phi3.rope.scaling.original_context_length",
            config["max_position_embeddings"])
    return config


def _architecture(metadata: dict[str, Any]) -> str:
    """The file's `general.architecture`, if Tandem builds it."""
    arch = _scalar(metadata, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise EngineError(
            f"Unsupported model architecture '{arch}' in GGUF file "
            f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)}).",
            "unsupported-architecture",
        )
    return arch


def _shape_config(metadata: dict[str, Any], arch: str) -> dict[str, Any]:
    """The config's sizes and constants from the `<arch>.*` keys (unchecked)."""
    try:
        hidden = int(_scalar(metadata, f"{arch}.embedding_length"))
        n_heads = int(_scalar(metadata, f"{arch}.attention.head_count"))
        config = {
            "model_type": _MODEL_TYPES[arch],
            "hidden_size": hidden,
            "num_hidden_layers": int(_scalar(metadata, f"{arch}.block_count")),
            "intermediate_size": int(_scalar(metadata, f"{arch}.feed_forward_length")),
            "num_attention_heads": n_heads,
            "num_key_value_heads": int(
                _scalar(metadata, f"{arch}.attention.head_count_kv", n_heads)
            ),
            "rms_norm_eps": float(
                _scalar(metadata, f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)
            ),
            "rope_theta": float(_scalar(metadata, f"{arch}.rope.freq_base", 10000.0)),
            "max_position_embeddings": int(_scalar(metadata, f"{arch}.context_length", 2048)),
        }
        tokens = metadata.get("tokenizer.ggml.tokens")
        config["vocab_size"] = int(_scalar(metadata, f"{arch}.vocab_size",
                                           len(tokens) if isinstance(tokens, list) else 0))
        key_length = _scalar(metadata, f"{arch}.attention.key_length")
        config["head_dim"] = (int(key_length) if key_length else
                              hidden // n_heads if n_heads > 0 else None)
    except (TypeError, KeyError, ValueError, OverflowError) as e:
        raise EngineError(f"GGUF metadata is incomplete or not numbers: {e}.",
                          "corrupt-model") from e
    # llama.cpp's converter permutes Q and K of llama models into the
    # interleaved RoPE layout; qwen2 is stored in the NeoX (split) layout.
    config["rope_traditional"] = arch == "llama"
    config["tie_word_embeddings"] = True  # the loader unties it when the file has an output
    return config


def _check_shape(config: dict[str, Any], arch: str) -> None:
    """config_check's bounds, naming the file's own key too."""
    try:
        check_config(config, "GGUF metadata")
    except EngineError as e:
        keys = [f"{arch}.{key}" for name, key in _CONFIG_KEYS.items() if name in str(e)]
        raise EngineError(f"{e} (GGUF key {', '.join(keys)})" if keys else str(e),
                          e.kind) from None


def rename_weights(weights: dict[str, mx.array], arch: str = "llama") -> dict[str, mx.array]:
    """GGUF tensor names to mlx-lm names; raises on tensors it does not know."""
    layer_names = _LAYER_NAMES | _ARCH_LAYER_NAMES.get(arch, {})
    renamed: dict[str, mx.array] = {}
    for name, value in weights.items():
        stem, _, suffix = name.rpartition(".")
        parts = stem.split(".")
        if arch == "gemma3" and stem.endswith("norm") and suffix == "weight":
            # llama.cpp stores Gemma's RMSNorm weights as 1 + w; mlx-lm adds the 1.
            value = value - 1
        if parts[0] == "blk" and len(parts) == 3 and parts[2] in layer_names:
            new = f"model.layers.{parts[1]}.{layer_names[parts[2]]}"
        elif stem in _TOP_NAMES:
            new = _TOP_NAMES[stem]
        elif stem == "rope_freqs":
            continue
        else:
            raise EngineError(f"Unexpected tensor '{name}' in GGUF file.", "unsupported-architecture")
        renamed[f"{new}.{suffix}"] = value
    return renamed


def quantization_bits(weights: dict[str, mx.array], prefix: str) -> int:
    """Bits per weight of a quantized layer, from its packed and scale shapes."""
    packed_cols = weights[f"{prefix}.weight"].shape[-1]
    in_dim = weights[f"{prefix}.scales"].shape[-1] * GGUF_GROUP_SIZE
    return packed_cols * 32 // in_dim


def quantize_model_like(model: nn.Module, weights: dict[str, mx.array]) -> None:
    """Turn the model's Linear/Embedding layers quantized where `weights` are."""

    def predicate(path: str, module: nn.Module) -> bool | dict[str, int]:
        if f"{path}.scales" not in weights:
            return False
        return {"group_size": GGUF_GROUP_SIZE, "bits": quantization_bits(weights, path)}

    nn.quantize(model, class_predicate=predicate)
