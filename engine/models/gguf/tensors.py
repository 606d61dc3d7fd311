"""Read a GGUF file's tensors one at a time into MLX arrays.

`mx.load` reads a whole GGUF at once: Q4_0, Q4_1 and Q8_0 into MLX quantized
arrays and F32/F16 as they are, but it dequantizes K-quants to float16 (four
times the file) and turns BF16 into float16 (values beyond 65504 become inf).
This reader takes every type in gguf_check.SUPPORTED_TENSOR_TYPES, tensor by
tensor and, within a tensor, in chunks of rows (converted on a small thread
pool: numpy releases the GIL), so the memory a load needs is the loaded model
plus one tensor (and a few MiB of scratch): never a dense copy of the model.

Quantized tensors become MLX affine quantized arrays with groups of 32 (packed
uint32 weight, float16 scales and biases, named as `mx.load` names them):

- Q4_0, Q4_1, Q4_K -> 4 bits; Q5_0, Q5_1, Q5_K -> 5 bits; Q8_0 -> 8 bits. Every
  32-element group of these formats is already affine (value = scale * q +
  bias, q the stored integer), so the stored integers are kept as they are and
  only the group's scale and bias are rounded to float16: exact for the _0/_1
  types (their scales are float16), within 2^-11 relative for the K-quants
  (their scale is a float16 times a 6-bit integer).
- Q6_K -> 8 bits. Its sub-blocks of 16 values have their own scales and MLX's
  smallest group is 32, so each group of 32 is requantized to 8 bits over its
  range: the step is range / 255, about a quarter of the coarser Q6_K step.

The values come from gguf's own dequantizer (`gguf.quants.dequantize`); the
stored integers are recovered from them as round((value - bias) / scale).
Float tensors stay dense in their own dtype (BF16 as mx.bfloat16). A quantized
1-D tensor (none in llama.cpp's models) is dequantized to float32.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import mlx.core as mx
import numpy as np
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from .check import SUPPORTED_TENSOR_TYPES, TensorInfo

GROUP_SIZE = 32
# Rows dequantized at a time: about 2^18 values (1 MiB of float32), which keeps
# numpy's temporaries in cache and the scratch small.
CHUNK_VALUES = 1 << 18

# What `mx.load` reads exactly: a file of these types only loads through it
# (the bundled default model is Q4_1/Q8_0/F32). BF16 is not among them: mx.load
# makes it float16.
MX_LOAD_TYPES = frozenset({"F32", "F16", "Q4_0", "Q4_1", "Q8_0"})

# Float types, as the numpy dtype their bytes are read as.
DENSE_TYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}
# Quantized types: the MLX bits each becomes.
QUANT_BITS = {"Q4_0": 4, "Q4_1": 4, "Q4_K": 4, "Q5_0": 5, "Q5_1": 5, "Q5_K": 5,
              "Q8_0": 8, "Q6_K": 8}
assert set(DENSE_TYPES) | set(QUANT_BITS) == SUPPORTED_TENSOR_TYPES


def loaded_nbytes(info: TensorInfo) -> int:
    """The bytes a tensor takes once loaded (what `read_tensor` makes of it):
    float tensors as they are, a quantized matrix as MLX's affine format
    (its bits a value, a float16 scale and bias per group of 32), a
    quantized vector dequantized to float32."""
    count = math.prod(info.dims)
    if info.type in DENSE_TYPES:
        return info.nbytes
    if len(info.dims) == 1:
        return count * 4
    return count * QUANT_BITS[info.type] // 8 + count // GROUP_SIZE * 4


def _f16(blocks: np.ndarray, at: int) -> np.ndarray:
    """The float16 at byte `at` of each block, as float32 (n_blocks, 1)."""
    return blocks[:, at:at + 2].view(np.float16).astype(np.float32)


def _offset(zero: int) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Q4_0/Q5_0/Q8_0: value = d * (q - zero)."""
    def affine(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d = _f16(blocks, 0)
        return d, -zero * d
    return affine


def _min(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_1/Q5_1: value = d * q + m."""
    return _f16(blocks, 0), _f16(blocks, 2)


def _k(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K: value = d * sc[j] * q - dmin * m[j] in sub-block j of 32."""
    sc, m = quants.Q4_K.get_scale_min(blocks[:, 4:16])
    return _f16(blocks, 0) * sc.astype(np.float32), -(_f16(blocks, 2) * m.astype(np.float32))


# Per block: each 32-group's scale and bias, as float32 (n_blocks, groups per block).
_AFFINE = {"Q4_0": _offset(8), "Q5_0": _offset(16), "Q8_0": _offset(128),
           "Q4_1": _min, "Q5_1": _min, "Q4_K": _k, "Q5_K": _k}


def read_tensors(path: str | Path, infos: list[TensorInfo]) -> dict[str, mx.array]:
    """Every tensor of the file (as `validate_gguf` listed them), read one by one."""
    weights: dict[str, mx.array] = {}
    with open(path, "rb") as f:
        for info in infos:
            weights.update(read_tensor(f, info))
    return weights


def read_tensor(f, info: TensorInfo) -> dict[str, mx.array]:
    """One tensor: {name: dense} or {name: packed, prefix.scales, prefix.biases}."""
    shape = tuple(reversed(info.dims))  # numpy order: ne0 is the last axis
    if info.type in DENSE_TYPES:
        data = np.empty(shape, DENSE_TYPES[info.type])
        _read_into(f, info.start, memoryview(data).cast("B"))
        array = mx.array(data)
        if info.type == "BF16":
            array = array.view(mx.bfloat16)
        mx.eval(array)
        return {info.name: array}
    if len(shape) == 1:
        raw = np.empty(info.nbytes, np.uint8)
        _read_into(f, info.start, memoryview(raw))
        array = mx.array(quants.dequantize(raw, GGMLQuantizationType[info.type]))
        mx.eval(array)
        return {info.name: array}
    return _read_quantized(f, info, shape)


def _read_quantized(f, info: TensorInfo, shape: tuple[int, ...]) -> dict[str, mx.array]:
    qtype = GGMLQuantizationType[info.type]
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    bits = QUANT_BITS[info.type]
    cols = shape[-1]
    rows = info.nbytes // (cols // block_size * type_size)
    row_bytes = cols // block_size * type_size
    packed = np.empty((rows, cols * bits // 32), np.uint32)
    scales = np.empty((rows, cols // GROUP_SIZE), np.float16)
    biases = np.empty_like(scales)
    step = max(1, CHUNK_VALUES // cols)
    affine = _AFFINE.get(info.type)
    fd = f.fileno()

    def convert(r0: int) -> None:
        """Rows r0 to r0 + step: each chunk writes its own rows of the outputs."""
        n = min(step, rows - r0)
        chunk = _pread(fd, info.start + r0 * row_bytes, n * row_bytes)
        with np.errstate(all="ignore"):  # a damaged block's NaN scale: garbage in, no crash
            values = quants.dequantize(chunk.reshape(n, row_bytes), qtype)
            values = values.reshape(n, cols // GROUP_SIZE, GROUP_SIZE)
            if affine is not None:
                scale, bias = (a.reshape(n, cols // GROUP_SIZE)
                               for a in affine(chunk.reshape(-1, type_size)))
                scales[r0:r0 + n] = scale
                biases[r0:r0 + n] = bias
            else:  # Q6_K: requantize each group over its range
                scale, bias = _range_affine(values, bits, scales[r0:r0 + n], biases[r0:r0 + n])
            packed[r0:r0 + n] = _pack(_integers(values, scale, bias, bits), bits)

    # numpy releases the GIL in its loops: chunks run on the CPU's cores.
    for _ in _pool().map(convert, range(0, rows, step)):
        pass
    prefix = info.name[:-len(".weight")] if info.name.endswith(".weight") else info.name
    out = {info.name: mx.array(packed).reshape(*shape[:-1], -1),
           f"{prefix}.scales": mx.array(scales).reshape(*shape[:-1], -1),
           f"{prefix}.biases": mx.array(biases).reshape(*shape[:-1], -1)}
    mx.eval(list(out.values()))
    return out


def _range_affine(values: np.ndarray, bits: int, scales16: np.ndarray,
                  biases16: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scale and bias spanning each group's range with 2^bits - 1 steps, written
    as float16 into scales16/biases16; returned as float32, as stored."""
    lo = values.min(axis=-1)
    hi = values.max(axis=-1)
    scales16[:] = (hi - lo) / (2**bits - 1)
    # Round the step up where float16 rounded it down, so the top is reachable.
    short = scales16.astype(np.float32) * (2**bits - 1) < hi - lo
    scales16[short] = np.nextafter(scales16[short], np.float16(np.inf))
    biases16[:] = lo
    return scales16.astype(np.float32), biases16.astype(np.float32)


def _integers(values: np.ndarray, scale: np.ndarray, bias: np.ndarray, bits: int) -> np.ndarray:
    """round((value - bias) / scale), clipped to the bits' range, as uint8 (rows, cols)."""
    scale = np.where(scale == 0, np.float32(1), scale)[..., None]
    q = values - bias[..., None]
    q /= scale
    np.rint(q, out=q)
    np.clip(q, 0, 2**bits - 1, out=q)
    return q.astype(np.uint8).reshape(q.shape[0], -1)


def _pack(q: np.ndarray, bits: int) -> np.ndarray:
    """MLX's packing: each row's values as one little-endian bit stream, `bits`
    per value, read as uint32."""
    rows = q.shape[0]
    if bits == 8:
        return q.view(np.uint32)
    if bits == 4:
        return (q[:, 0::2] | (q[:, 1::2] << 4)).view(np.uint32)
    eights = q.reshape(rows, -1, 8).astype(np.uint64)  # 8 values fill `bits` whole bytes
    acc = eights[..., 0].copy()
    for i in range(1, 8):
        acc |= eights[..., i] << np.uint64(bits * i)
    stream = acc.view(np.uint8).reshape(rows, -1, 8)[..., :bits]
    return np.ascontiguousarray(stream).reshape(rows, -1).view(np.uint32)


_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(min(8, os.cpu_count() or 1), thread_name_prefix="gguf-read")
    return _POOL


def _pread(fd: int, offset: int, n: int) -> np.ndarray:
    data = os.pread(fd, n, offset)
    if len(data) != n:
        raise ValueError(f"the file ended {n - len(data)} bytes early at byte {offset}")
    return np.frombuffer(data, np.uint8)


def _read_into(f, offset: int, buf: memoryview) -> None:
    f.seek(offset)
    got = f.readinto(buf)
    if got != len(buf):
        raise ValueError(f"the file ended {len(buf) - (got or 0)} bytes early at byte {offset}")
