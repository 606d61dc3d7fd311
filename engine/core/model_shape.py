"""What the memory plan knows of a model: its KV bytes per token and its
weights' bytes (`ModelShape`), measured from a loaded model
(engine/runtime/weights.py) or read from a config.json without loading it
(`shape_from_config`, for the model library). Plain Python (no MLX)."""

from __future__ import annotations

import math
from dataclasses import dataclass

FORMAT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(slots=True, frozen=True)
class ModelShape:
    """What the plan needs to know of a model: its KV size and weight bytes."""
    num_layers: int
    num_kv_heads: int
    head_dim: int
    kv_dtype_bytes: int  # 2 for float16/bfloat16, 4 for float32
    weight_bytes: int  # the weights as loaded (quantized arrays incl. scales and biases)
    dense_params: int  # parameters, to size a dense copy
    context_length: int
    is_quantized: bool = True
    loaded_format: str | None = None  # e.g. "bfloat16"; None: see weight_format
    aux_kv_bytes: int = 0  # per token, of auxiliary models a request uses (AuxModel)

    @property
    def kv_bytes_per_token(self) -> int:
        """Keys and values of one token across all layers (and an auxiliary
        model's, for a request that uses one)."""
        return (self.num_layers * self.num_kv_heads * self.head_dim * 2 * self.kv_dtype_bytes
                + self.aux_kv_bytes)

    @property
    def weight_format(self) -> str:
        """The name of the format the weights were loaded in: `loaded_format`, else
        "quantized", else "shared" (the arrays as loaded, whatever their dtype)."""
        return self.loaded_format or ("quantized" if self.is_quantized else "shared")

    def dense_bytes(self, dtype_bytes: int) -> int:
        """Bytes of a dense copy with `dtype_bytes` per parameter."""
        return self.dense_params * dtype_bytes


def shape_from_config(config: dict, weight_bytes: int | None = None,
                      kv_dtype_bytes: int = 2) -> ModelShape:
    """A llama-like decoder's shape from its Hugging Face / mlx-lm config.json.

    Parameters: embeddings (and lm_head unless tied), per layer the q/k/v/o
    projections, gate/up/down and two norms, and the final norm. Without
    `weight_bytes`, an mlx-community "quantization" ({"bits", "group_size"})
    gives the quantized matrices at `bits` plus a float16 scale and bias per
    group and norms in float16; otherwise the weights count as float16."""
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    vocab, inter = config["vocab_size"], config["intermediate_size"]
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", False) else 2)
    per_layer = (2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
                 + 3 * hidden * inter)
    biases = (heads + 2 * kv_heads) * head_dim if config.get("attention_bias") else 0
    norms = layers * 2 * hidden + hidden
    matrices = embeddings + layers * per_layer
    dense_params = matrices + layers * biases + norms
    quantization = config.get("quantization")
    if weight_bytes is None:
        if quantization:
            bits, group = quantization["bits"], quantization["group_size"]
            weight_bytes = (matrices * bits // 8 + math.ceil(matrices / group) * 2 * 2
                            + (layers * biases + norms) * 2)
        else:
            weight_bytes = dense_params * 2
    dtype = config.get("torch_dtype")
    return ModelShape(num_layers=layers, num_kv_heads=kv_heads, head_dim=head_dim,
                      kv_dtype_bytes=kv_dtype_bytes, weight_bytes=weight_bytes,
                      dense_params=dense_params,
                      context_length=config.get("max_position_embeddings") or 4096,
                      is_quantized=quantization is not None,
                      loaded_format=None if quantization else dtype if dtype in FORMAT_BYTES
                      else None)
