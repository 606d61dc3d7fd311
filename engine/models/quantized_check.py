"""A quantized model's tensors, checked against their format before any
kernel reads them (issue 51): packed uint32 words for its bits, one scale and
one bias (same shape, same dtype) per group of 32, 64 or 128. A truncated or
mismatched tensor is refused with an `EngineError` naming it, never read out
of bounds by Tandem's kernels (which trust the shapes) nor turned into
garbage by MLX's op.

`check_quantized_files` reads a folder's safetensors headers (a few KiB of
JSON, no tensor data) before mlx-lm builds anything; `check_quantized` walks
the built model's quantized layers (GGUF files and whatever the files check
could not see).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from ..core.errors import EngineError

GROUPS = (32, 64, 128)
MAX_HEADER = 100 << 20  # safetensors' own limit on the JSON header


def _headers(path: Path) -> dict[str, dict]:
    """Every tensor's {"dtype", "shape"} across the folder's safetensors."""
    tensors: dict[str, dict] = {}
    for file in sorted(path.glob("*.safetensors")):
        with open(file, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise EngineError(f"{path.name}: {file.name} is truncated.", "corrupt-model")
            (size,) = struct.unpack("<Q", raw)
            if size > MAX_HEADER:
                raise EngineError(f"{path.name}: {file.name} has an implausible header.",
                                  "corrupt-model")
            try:
                header = json.loads(f.read(size))
            except (ValueError, UnicodeDecodeError) as e:
                raise EngineError(f"{path.name}: {file.name}'s header is not valid JSON ({e}).",
                                  "corrupt-model") from None
        if isinstance(header, dict):
            tensors.update({k: v for k, v in header.items()
                            if k != "__metadata__" and isinstance(v, dict)})
    return tensors


def _bits(config: dict, prefix: str) -> int | None:
    quant = config.get("quantization") or config.get("quantization_config") or {}
    if not isinstance(quant, dict):
        return None
    layer = quant.get(prefix)
    if isinstance(layer, dict) and isinstance(layer.get("bits"), int):
        return layer["bits"]
    return quant.get("bits") if isinstance(quant.get("bits"), int) else None


def check_quantized_files(path: Path, config: dict) -> None:
    """The folder's packed weights, scales and biases agree (affine formats
    with the config's bits): EngineError naming the first tensor that does not."""
    tensors = _headers(path)
    for name, scales in tensors.items():
        if not name.endswith(".scales"):
            continue
        prefix = name[: -len(".scales")]
        weight, biases = tensors.get(f"{prefix}.weight"), tensors.get(f"{prefix}.biases")
        bits = _bits(config, prefix)
        if weight is None or bits is None or weight.get("dtype") != "U32" or biases is None:
            continue  # not an affine layer this check knows: mlx-lm's load judges it
        w_shape, s_shape = list(weight.get("shape", [])), list(scales.get("shape", []))
        problem = None
        if len(w_shape) != 2 or len(s_shape) != 2 or w_shape[0] != s_shape[0]:
            problem = (f"{prefix}.scales has shape {s_shape} for a weight of shape {w_shape}")
        else:
            K = w_shape[1] * 32 // bits
            if s_shape[1] == 0 or K % s_shape[1] or K // s_shape[1] not in GROUPS:
                problem = (f"{prefix}.scales has {s_shape[1]} groups a row for {K} "
                           f"{bits}-bit values (groups of {', '.join(map(str, GROUPS))} "
                           "expected)")
            elif biases.get("shape") != s_shape or biases.get("dtype") != scales.get("dtype"):
                problem = (f"{prefix}.biases is {biases.get('dtype')} of shape "
                           f"{biases.get('shape')}; its scales are {scales.get('dtype')} "
                           f"of shape {s_shape}")
        if problem:
            raise EngineError(f"{path.name}: a quantized tensor is damaged: {problem}.",
                              "corrupt-model")


def check_quantized(model, where: str) -> None:
    """Every quantized layer's arrays must agree with its format: packed
    words for its bits, one scale and one bias (same shape, same dtype) per
    group. A file whose tensors do not (truncated, another group size,
    scales and biases of different dtypes) is refused here, naming the
    tensor, before any kernel reads it (issue 51)."""
    import mlx.core as mx
    import mlx.nn as nn

    for name, module in model.named_modules():
        if not isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
            continue
        weight, scales = module["weight"], module["scales"]
        biases = module.get("biases")
        bits, group = module.bits, module.group_size
        problem = None
        if weight.ndim != 2 or weight.dtype != mx.uint32:
            problem = f"{name}.weight is {weight.dtype} of shape {tuple(weight.shape)}, " \
                      "not 2-D packed uint32"
        else:
            K = weight.shape[1] * 32 // bits
            groups = (weight.shape[0], K // group if K % group == 0 else -1)
            if K % group:
                problem = (f"{name}.weight packs {K} values a row, not whole groups of "
                           f"{group}")
            elif tuple(scales.shape) != groups:
                problem = (f"{name}.scales has shape {tuple(scales.shape)}; {bits}-bit rows "
                           f"of {K} values in groups of {group} need {groups}")
            elif biases is not None and (tuple(biases.shape) != groups
                                         or biases.dtype != scales.dtype):
                problem = (f"{name}.biases is {biases.dtype} of shape {tuple(biases.shape)}; "
                           f"its scales are {scales.dtype} of shape {groups}")
        if problem:
            raise EngineError(f"{where}: a quantized tensor is damaged: {problem}.",
                              "corrupt-model")
