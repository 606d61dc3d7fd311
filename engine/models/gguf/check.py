"""Check a GGUF file's structure before MLX reads it.

`mx.load` (gguflib inside MLX) trusts every count, length, shape and offset in
a GGUF file, so a damaged file crashes the whole process with a segfault
instead of raising. `validate_gguf` walks the header, the metadata and the
tensor infos with a bounds check on every read, checks each tensor's type,
shape and byte range against the file size, and raises EngineError for
anything `mx.load` could not read safely. It reads no tensor data, and returns
the tensor infos it checked (name, GGUF shape, type, byte range) for the
tensor-by-tensor reader (engine/models/gguf/tensors.py).

The type tables come from llama.cpp's `gguf` package. Its GGUFReader is not
used for the walk: it builds numpy views for every metadata element and takes
about 3 s on the default model's 100k tokenizer strings; this walk takes a few
tens of milliseconds.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from gguf.constants import (GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType,
                            GGUFValueType)

from ...core.errors import EngineError

# The tensor types Tandem loads (the one list; engine/models/gguf/tensors.py says how
# each becomes MLX arrays). Float types stay dense; the quantized ones become
# MLX quantized arrays of 4, 5 or 8 bits. Other types (Q2_K, Q3_K, the IQ and
# ternary types, ...) are refused here with a clear error.
SUPPORTED_TENSOR_TYPES = frozenset({
    "F32", "F16", "BF16",
    "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
    "Q4_K", "Q5_K", "Q6_K",
})

# Version 1 had 32-bit counts; gguflib only reads the layout of 2 and later.
SUPPORTED_VERSIONS = (2, 3)
MAX_DIMS = 4  # GGML_MAX_DIMS: gguflib copies the dims into a 4-slot array
MAX_NAME_BYTES = 65535  # the GGUF spec's limit for key names
MAX_DIM = 2**31 - 1  # MLX shapes are int32

_SCALAR_SIZES = {
    GGUFValueType.UINT8: 1, GGUFValueType.INT8: 1, GGUFValueType.BOOL: 1,
    GGUFValueType.UINT16: 2, GGUFValueType.INT16: 2,
    GGUFValueType.UINT32: 4, GGUFValueType.INT32: 4, GGUFValueType.FLOAT32: 4,
    GGUFValueType.UINT64: 8, GGUFValueType.INT64: 8, GGUFValueType.FLOAT64: 8,
}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class _Damaged(Exception):
    """What is wrong with the file, in words."""


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor as the file describes it, once checked."""
    name: str
    dims: tuple[int, ...]  # GGUF order: dims[0] (ne0) is the fastest-varying axis
    type: str  # a GGMLQuantizationType name, one of SUPPORTED_TENSOR_TYPES
    start: int  # absolute byte offset of its data in the file
    nbytes: int


def validate_gguf(path: str | Path) -> list[TensorInfo]:
    """Raise EngineError unless `path` is a GGUF file `mx.load` can read safely;
    return its tensor infos, in file order."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(0)
            if f.read(4) != b"GGUF":
                raise EngineError(f"{path.name} is not a GGUF model file.", "not-a-model")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _check(_Reader(buf, size))
    except OSError as e:
        raise EngineError(f"Cannot read model file {path}: {e.strerror}.", "model-not-found") from e
    except EngineError:
        raise
    except Exception as e:  # _Damaged, or a check this walk missed: still damage, not a crash
        what = str(e) if isinstance(e, _Damaged) else f"{type(e).__name__}: {e}"
        raise EngineError(f"{path} is corrupt or not a supported GGUF file: {what}",
                          "corrupt-model") from None


class _Reader:
    """Little-endian reads from the mapped file; reading past its end is damage."""

    def __init__(self, buf: mmap.mmap, size: int):
        self.buf, self.size, self.off = buf, size, 4  # after the magic

    def take(self, n: int, what: str) -> int:
        """Skip `n` bytes; returns where they start."""
        start = self.off
        if n > self.size - start:
            raise _Damaged(f"{what} at byte {start} runs past the end of the file "
                           f"({self.size} bytes): truncated or damaged")
        self.off += n
        return start

    def u32(self, what: str) -> int:
        return _U32.unpack_from(self.buf, self.take(4, what))[0]

    def u64(self, what: str) -> int:
        return _U64.unpack_from(self.buf, self.take(8, what))[0]

    def name(self, what: str) -> str:
        n = self.u64(what)
        if n > MAX_NAME_BYTES:
            raise _Damaged(f"{what} at byte {self.off - 8} has an impossible length "
                           f"of {n} bytes")
        start = self.take(n, what)
        try:
            return self.buf[start:start + n].decode("utf-8")
        except UnicodeDecodeError:
            raise _Damaged(f"{what} at byte {start} is not UTF-8 text") from None

    def skip_strings(self, count: int, what: str) -> None:
        # The tokenizer holds ~100k strings: a tight loop on locals.
        buf, size, off, unpack = self.buf, self.size, self.off, _U64.unpack_from
        for _ in range(count):
            if off + 8 > size:  # this string's length field is cut off
                off = size + 1
                break
            off += 8 + unpack(buf, off)[0]
        if off > size:
            raise _Damaged(f"{what} runs past the end of the file ({size} bytes): "
                           f"truncated or damaged")
        self.off = off


def _check(r: _Reader) -> list[TensorInfo]:
    n_tensors, n_kv = _read_counts(r)
    alignment = _read_metadata(r, n_kv)
    infos = _read_tensor_infos(r, n_tensors)
    return _place_tensors(r, infos, alignment)


def _read_counts(r: _Reader) -> tuple[int, int]:
    """The version, then the tensor and metadata counts, bounded by the file's size."""
    version = r.u32("version")
    if version not in SUPPORTED_VERSIONS:
        raise _Damaged(f"unsupported GGUF version {version} (Tandem reads versions 2 and 3)")
    n_tensors = r.u64("tensor count")
    n_kv = r.u64("metadata count")
    # A key/value takes at least 13 bytes and a tensor info at least 32: larger
    # counts are damage, and rejecting them first bounds every loop below.
    if 13 * n_kv + 32 * n_tensors > r.size - r.off:
        raise _Damaged(f"the header claims {n_tensors} tensors and {n_kv} metadata keys, "
                       f"more than a {r.size}-byte file can hold")
    return n_tensors, n_kv


def _read_metadata(r: _Reader, n_kv: int) -> int:
    """Walk the metadata (each key once); returns the data alignment."""
    alignment = GGUF_DEFAULT_ALIGNMENT
    keys: set[str] = set()
    for _ in range(n_kv):
        key = r.name("a metadata key")
        if key in keys:
            raise _Damaged(f"metadata key '{key}' appears twice")
        keys.add(key)
        vtype = r.u32(f"the type of metadata '{key}'")
        if key == "general.alignment":
            # gguflib divides by it: zero would be a crash, not an error.
            if vtype != GGUFValueType.UINT32:
                raise _Damaged("metadata 'general.alignment' is not a uint32")
            alignment = r.u32("general.alignment")
            if alignment == 0 or alignment & (alignment - 1):
                raise _Damaged(f"alignment {alignment} is not a power of two")
        else:
            _skip_value(r, key, vtype)
    return alignment


def _read_tensor_infos(r: _Reader, n_tensors: int) -> list[tuple[str, tuple, int, int]]:
    """Each tensor's (name, dims, type, offset), names unique, dims bounded."""
    infos = []
    names: set[str] = set()
    for i in range(n_tensors):
        name = r.name(f"the name of tensor {i}")
        if name in names:
            raise _Damaged(f"tensor '{name}' appears twice")
        names.add(name)
        n_dims = r.u32(f"the dimension count of tensor '{name}'")
        if not 1 <= n_dims <= MAX_DIMS:
            raise _Damaged(f"tensor '{name}' claims {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
        at = r.take(8 * n_dims, f"the shape of tensor '{name}'")
        dims = struct.unpack_from(f"<{n_dims}Q", r.buf, at)
        ttype = r.u32(f"the type of tensor '{name}'")
        offset = r.u64(f"the data offset of tensor '{name}'")
        infos.append((name, dims, ttype, offset))
    return infos


def _place_tensors(r: _Reader, infos: list[tuple[str, tuple, int, int]],
                   alignment: int) -> list[TensorInfo]:
    """Each tensor's data: aligned, inside the file, overlapping no other."""
    data_start = -(-r.off // alignment) * alignment
    spans = []
    checked = []
    for name, dims, ttype, offset in infos:
        nbytes = _tensor_nbytes(name, dims, ttype)
        if offset % alignment:
            raise _Damaged(f"tensor '{name}' starts at offset {offset}, "
                           f"not a multiple of the alignment {alignment}")
        start = data_start + offset
        if start + nbytes > r.size:
            raise _Damaged(f"the data of tensor '{name}' (bytes {start} to {start + nbytes}) "
                           f"lies past the end of the file ({r.size} bytes): truncated or damaged")
        spans.append((start, start + nbytes, name))
        checked.append(TensorInfo(name, dims, GGMLQuantizationType(ttype).name, start, nbytes))
    spans.sort()
    for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
        if start < end:
            raise _Damaged(f"the data of tensors '{a}' and '{b}' overlap")
    return checked


def _skip_value(r: _Reader, key: str, vtype: int) -> None:
    what = f"metadata '{key}'"
    if vtype == GGUFValueType.STRING:
        r.take(r.u64(what), what)
    elif vtype in _SCALAR_SIZES:
        r.take(_SCALAR_SIZES[vtype], what)
    elif vtype == GGUFValueType.ARRAY:
        etype = r.u32(what)
        count = r.u64(what)
        if etype == GGUFValueType.STRING:
            if count > (r.size - r.off) // 8:  # each string has an 8-byte length
                raise _Damaged(f"{what} claims {count} strings, more than the file can hold")
            r.skip_strings(count, what)
        elif etype in _SCALAR_SIZES:
            r.take(count * _SCALAR_SIZES[etype], what)
        elif etype == GGUFValueType.ARRAY:
            raise _Damaged(f"{what} is a nested array, which MLX cannot read")
        else:
            raise _Damaged(f"{what} is an array of unknown type {etype}")
    else:
        raise _Damaged(f"{what} has unknown value type {vtype}")


def _tensor_nbytes(name: str, dims: tuple[int, ...], ttype: int) -> int:
    """The tensor's size in bytes, once its type and shape are checked."""
    try:
        qtype = GGMLQuantizationType(ttype)
        block_size, type_size = GGML_QUANT_SIZES[qtype]
    except (ValueError, KeyError):
        raise _Damaged(f"unknown tensor type {ttype} in tensor '{name}'") from None
    if qtype.name not in SUPPORTED_TENSOR_TYPES:
        raise _Damaged(f"unsupported tensor type {qtype.name} in tensor '{name}' "
                       f"(Tandem reads {', '.join(sorted(SUPPORTED_TENSOR_TYPES))})")
    if not all(1 <= d <= MAX_DIM for d in dims):
        raise _Damaged(f"tensor '{name}' has an impossible shape {list(dims)}")
    # GGML stores whole blocks along the first (innermost) dimension.
    if dims[0] % block_size:
        raise _Damaged(f"tensor '{name}' of type {qtype.name} has a first dimension {dims[0]} "
                       f"that is not a multiple of its block size {block_size}")
    n_elements = 1
    for d in dims:
        n_elements *= d
    return n_elements // block_size * type_size
