"""A model's shape, checked before anything is built from it.

A config (a folder's config.json, or what a GGUF's metadata says) with a
billion layers, zero heads or a negative epsilon would otherwise allocate
until the machine gives out, or fail deep inside a model class with a
traceback. Every count, size and constant is checked here to be a number in
a believable range and consistent with the others; the bounds are generous
enough for real models (262k-token vocabularies, 1M-token contexts,
hundreds of layers). A refusal is an `EngineError` naming the field.
"""

from __future__ import annotations

import math

import psutil

from ..core.errors import EngineError
from ..core.memory import format_bytes

HEADROOM_BYTES = 512 << 20  # what the rest of the process needs beside the weights

# name: (smallest, largest); the first four every model must have.
BOUNDS = {
    "num_hidden_layers": (1, 1024),
    "hidden_size": (1, 1 << 17),
    "num_attention_heads": (1, 1024),
    "vocab_size": (1, 1 << 22),
    "num_key_value_heads": (1, 1024),
    "intermediate_size": (1, 1 << 20),
    "head_dim": (1, 4096),
    "max_position_embeddings": (1, 1 << 24),
    "sliding_window": (1, 1 << 24),
}
REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")
EPSILONS = ("rms_norm_eps", "layer_norm_eps", "norm_eps", "layer_norm_epsilon")
POSITIVE = ("rope_theta",)


def check_config(config: dict, where: str) -> None:
    """Raise EngineError ("corrupt-model") unless `config` describes a
    believable model. A nested `text_config` (multimodal configs) is checked
    as the model's."""
    if not isinstance(config, dict):
        raise EngineError(f"{where}: the model's config is not an object.", "corrupt-model")
    text = config.get("text_config")
    if isinstance(text, dict):
        config = {**config, **text}
    for name, (low, high) in BOUNDS.items():
        value = config.get(name)
        if value is None:
            if name in REQUIRED:
                raise EngineError(f"{where}: the config has no {name}.", "corrupt-model")
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise EngineError(f"{where}: {name} = {value!r} is not a believable model size "
                              f"(expected a whole number from {low} to {high}).",
                              "corrupt-model")
    for name in EPSILONS + POSITIVE:
        value = config.get(name)
        if value is None:
            continue
        ok = (not isinstance(value, bool) and isinstance(value, (int, float))
              and math.isfinite(value) and value > 0 and (name in POSITIVE or value < 1))
        if not ok:
            expected = "a positive number" if name in POSITIVE else "a number between 0 and 1"
            raise EngineError(f"{where}: {name} = {value!r} is not valid (expected "
                              f"{expected}).", "corrupt-model")
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    if kv_heads > heads or heads % kv_heads:
        raise EngineError(f"{where}: num_attention_heads = {heads} cannot share "
                          f"num_key_value_heads = {kv_heads} (it must divide them).",
                          "corrupt-model")
    if config.get("head_dim") is None and config["hidden_size"] % heads:
        raise EngineError(f"{where}: hidden_size = {config['hidden_size']} does not split "
                          f"into num_attention_heads = {heads}.", "corrupt-model")


def check_fits(weight_bytes: int, where: str, available: int | None = None) -> None:
    """Refuse, before reading them, weights that cannot fit in the memory this
    machine has free (with headroom): loading them would swap the machine to a
    halt or be killed."""
    available = psutil.virtual_memory().available if available is None else available
    if weight_bytes + HEADROOM_BYTES > available:
        raise EngineError(f"{where}: its weights need {format_bytes(weight_bytes)}, but only "
                          f"{format_bytes(available)} of memory is free here. Close other "
                          f"programs or choose a smaller (more quantized) model.",
                          "too-large-for-memory")


def check_finite(model, where: str) -> None:
    """One token through the model must give finite logits: NaN or infinite
    weights otherwise answer garbage with no error."""
    import mlx.core as mx

    logits = model(mx.array([[0]]))
    if not bool(mx.all(mx.isfinite(logits)).item()):
        raise EngineError(f"{where}: the weights are damaged (NaN or infinite values: one "
                          f"token through the model gives no usable answer).", "corrupt-model")
