"""What the memory plan needs to know of a loaded model, measured with MLX:
its shape and bytes and the machine's budget (what a CPU lane's matmuls
run is measured apart: engine/runtime/cpu_matmul.py)."""

from __future__ import annotations


import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.models.cache import make_prompt_cache

from ..core.model_shape import ModelShape


def model_shape(model: nn.Module, context_length: int) -> ModelShape:
    """Layers, KV heads and head size from a one-token probe; bytes and
    parameters from the model's arrays (quantized ones unpacked)."""
    from .cachekinds import attention_layers, first_attention

    cache = make_prompt_cache(model)
    with mx.stream(mx.cpu):
        model(mx.array([[0]]), cache=cache)
        attention = first_attention(cache)
        keys = attention.keys if attention is not None else mx.zeros((1, 0, 1, 0))
        mx.eval(keys)
    weight_bytes = sum(a.nbytes for _, a in tree_flatten(model.parameters()))
    params, quantized = 0, False
    for _, module in model.named_modules():
        if isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
            quantized = True
            params += module.weight.size * 32 // module.bits  # either layout (qmm_packed.py)
            if getattr(module, "bias", None) is not None:
                params += module.bias.size
        elif not module.children():
            params += sum(a.size for _, a in tree_flatten(module.parameters()))
    # Sliding-window layers are counted as full ones (an upper bound); a
    # recurrent state is fixed per request and small next to attention KV.
    return ModelShape(num_layers=attention_layers(cache), num_kv_heads=keys.shape[1],
                      head_dim=keys.shape[3],
                      kv_dtype_bytes=keys.dtype.size, weight_bytes=weight_bytes,
                      dense_params=params, context_length=context_length,
                      is_quantized=quantized)


def machine_budget(loaded_bytes: int) -> tuple[int, bool]:
    """Bytes the engine may plan with, and whether memory is unified.

    Available memory now (psutil) plus what the loaded weights already take
    (the plan counts them); on Metal, at most MLX's recommended working set."""
    import psutil

    budget = psutil.virtual_memory().available + loaded_bytes
    unified = True
    try:
        if mx.is_available(mx.gpu):
            info = mx.device_info()
            recommended = int(info.get("max_recommended_working_set_size", 0) or 0)
            if recommended:
                budget = min(budget, recommended)
            # Metal is unified memory. On CUDA the plan treats the GPU's
            # arrays as the CPU lane's to read too only on Metal: a discrete
            # GPU's lane copy is planned (and built) apart, which is never
            # wrong, only larger.
            unified = bool(mx.metal.is_available()) if hasattr(mx, "metal") else False
    except Exception:
        pass
    return budget, unified
