"""Read a GGUF file's metadata without its tensors.

`mx.load` returns the metadata only together with every tensor, and gguf's
GGUFReader takes over 2 s on a 50k-token vocabulary (a numpy view per string),
so this walk reads the header and the key/values with `struct` from a mapped
file: about 50 ms for the default model's vocabulary.

Call it on a file `validate_gguf` has passed (the walk trusts the counts and
lengths that check bounded). Values come back as plain Python: strings as
str, numbers as int, float or bool, arrays as lists (of str, int, float or
bool), as engine/models/gguf/values.py makes what `mx.load` returns.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import GGUFValueType

_SCALARS = {
    GGUFValueType.UINT8: ("<B", np.uint8), GGUFValueType.INT8: ("<b", np.int8),
    GGUFValueType.UINT16: ("<H", np.uint16), GGUFValueType.INT16: ("<h", np.int16),
    GGUFValueType.UINT32: ("<I", np.uint32), GGUFValueType.INT32: ("<i", np.int32),
    GGUFValueType.UINT64: ("<Q", np.uint64), GGUFValueType.INT64: ("<q", np.int64),
    GGUFValueType.FLOAT32: ("<f", np.float32), GGUFValueType.FLOAT64: ("<d", np.float64),
    GGUFValueType.BOOL: ("<?", np.bool_),
}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The key/values of a GGUF file that `validate_gguf` has passed."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        off = 8  # magic and version
        n_kv = _U64.unpack_from(buf, off + 8)[0]
        off += 16  # tensor count and key/value count
        metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key, off = _string(buf, off)
            vtype = _U32.unpack_from(buf, off)[0]
            metadata[key], off = _value(buf, off + 4, vtype)
        return metadata


def _string(buf: mmap.mmap, off: int) -> tuple[str, int]:
    n = _U64.unpack_from(buf, off)[0]
    off += 8
    return buf[off:off + n].decode("utf-8", errors="replace"), off + n


def _value(buf: mmap.mmap, off: int, vtype: int) -> tuple[Any, int]:
    if vtype == GGUFValueType.STRING:
        return _string(buf, off)
    if vtype in _SCALARS:
        fmt, _ = _SCALARS[vtype]
        return struct.unpack_from(fmt, buf, off)[0], off + struct.calcsize(fmt)
    if vtype != GGUFValueType.ARRAY:  # validate_gguf refuses anything else
        raise ValueError(f"unknown metadata value type {vtype}")
    etype = _U32.unpack_from(buf, off)[0]
    count = _U64.unpack_from(buf, off + 4)[0]
    off += 12
    if etype == GGUFValueType.STRING:
        # The vocabulary: ~100k strings, so a tight loop on locals.
        strings = []
        append, unpack = strings.append, _U64.unpack_from
        for _ in range(count):
            n = unpack(buf, off)[0]
            off += 8
            append(buf[off:off + n].decode("utf-8", errors="replace"))
            off += n
        return strings, off
    if etype not in _SCALARS:
        raise ValueError(f"metadata array of unsupported type {etype}")
    dtype = np.dtype(_SCALARS[etype][1]).newbyteorder("<")
    values = np.frombuffer(buf, dtype=dtype, count=count, offset=off).tolist()
    return values, off + count * dtype.itemsize
