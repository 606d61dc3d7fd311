"""One segment of a conversation's KV on disk (issue 33, the disk tier's
file format): positions [start, start + count) of a token prefix, every
layer's keys and values, for one model.

A file is `MAGIC`, a little-endian uint32 header length, a JSON header, then
the arrays' raw bytes. The header names the format version, the model's
identity, the block size and the chain hash at the end of each block it
holds (disk_tier.chain_hashes: each covers every token before it, so a
reader that knows a prefix's hashes knows which positions of the file are
that prefix's KV, and may use the first blocks alone), the positions, each
array's dtype, shape and place, and the BLAKE2b checksum of the bytes. Everything is
checked in plain Python before any MLX call sees the bytes (`check`):
mlx's own loaders crash the process on damaged files, as the GGUF checks
found. A file is read as data, never trusted: a well-formed file with a
valid checksum may still hold another model's shapes (`KVLayout`: its
layer count, KV heads and head sizes are checked), or NaN, inf or nothing
but zeros (refused by `decode`, in numpy, before MLX sees the values).
Arrays are built from the checked bytes with numpy (bfloat16 as its
uint16 bits). Writes are atomic: a temporary file, fsync, rename."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"TANDEMKV"
VERSION = 1
MAX_HEADER = 1 << 20  # bytes: a header is a few KiB even for 128 layers
DTYPES = {"float16": (np.float16, 2), "bfloat16": (np.uint16, 2), "float32": (np.float32, 4)}


class KVFileError(ValueError):
    """A file that is not a usable segment for this request; says why."""


@dataclass(slots=True, frozen=True)
class KVLayout:
    """What a model's KV is, per position: its attention layers, each
    layer's keys' and values' (KV heads, head size). Every segment read is
    checked against it: a file of another shape never reaches the model."""
    layers: int
    keys: tuple[int, int]
    values: tuple[int, int]

    def most_bytes(self, count: int) -> int:
        """The most bytes a segment of `count` positions can take (float32)."""
        (kh, kd), (vh, vd) = self.keys, self.values
        return len(MAGIC) + 4 + MAX_HEADER + self.layers * count * (kh * kd + vh * vd) * 4


def layout_of(model) -> KVLayout:
    """`model`'s KV layout, from a one-token probe on the CPU's stream (the
    caller's thread; as engine/runtime/weights.py's `model_shape`)."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from .cachekinds import attention_layers, first_attention

    cache = make_prompt_cache(model)
    with mx.stream(mx.cpu):
        model(mx.array([[0]]), cache=cache)
        first = first_attention(cache)
        if first is None:
            raise ValueError("a model without attention KV has no disk tier")
        mx.eval(first.keys, first.values)
    k, v = first.keys.shape, first.values.shape
    return KVLayout(attention_layers(cache), (k[1], k[3]), (v[1], v[3]))


@dataclass(slots=True, frozen=True)
class Segment:
    """A checked segment's header: what it holds and where."""
    model: str
    start: int
    count: int
    block: int
    blocks: tuple[str, ...]  # the chain hash at each block's end
    dtype: str
    arrays: tuple[tuple[tuple[int, ...], int], ...]  # (shape, offset in the payload)
    payload_offset: int


def encode(model: str, start: int, block: int, blocks: list[str], layers: list,
           parent: str = "") -> bytes:
    """A segment's bytes: `layers` is [(keys, values)] of MLX arrays, each
    (1, heads, count, head_dim) holding positions start .. start + count,
    count = len(blocks) x block; `blocks`: the chain hash at each block's
    end; `parent`: the chain hash at `start` ("" from position 0)."""
    import mlx.core as mx

    arrays = [a for pair in layers for a in pair]
    if not arrays:
        raise ValueError("a segment holds at least one layer")
    dtype = str(arrays[0].dtype).rsplit(".", 1)[-1]
    if dtype not in DTYPES or any(a.dtype != arrays[0].dtype for a in arrays):
        raise ValueError(f"KV of one dtype (float16, bfloat16, float32), not {dtype}")
    count = arrays[0].shape[2]
    if count != len(blocks) * block or start % block or not blocks:
        raise ValueError("a segment holds whole blocks, one hash each")
    blobs = [np.array(a.view(mx.uint16) if dtype == "bfloat16" else a).tobytes()
             for a in arrays]
    offsets, at = [], 0
    for a, blob in zip(arrays, blobs):
        offsets.append([list(a.shape), at])
        at += len(blob)
    payload = b"".join(blobs)
    header = json.dumps({
        "version": VERSION, "model": model, "block": block, "blocks": list(blocks),
        "parent": parent,
        "start": start, "count": count, "dtype": dtype, "arrays": offsets,
        "checksum": hashlib.blake2b(payload, digest_size=32).hexdigest()},
        separators=(",", ":")).encode()  # no whitespace: one spelling per header
    return MAGIC + struct.pack("<I", len(header)) + header + payload


def check(data: bytes, model: str, start: int, expect: list[str],
          layout: KVLayout | None = None) -> Segment:
    """The segment's header if `data` is a whole, undamaged segment of
    `model` starting at `start` whose first blocks end with the chain
    hashes `expect` (the prefix the reader has) and, given a `layout`,
    whose arrays are that model's; else KVFileError saying why. Plain
    Python: no MLX call."""
    head = len(MAGIC) + 4
    if len(data) < head or data[:len(MAGIC)] != MAGIC:
        raise KVFileError("not a Tandem KV file")
    (size,) = struct.unpack("<I", data[len(MAGIC):head])
    if size > MAX_HEADER or head + size > len(data):
        raise KVFileError("truncated or damaged header")
    try:
        header = json.loads(data[head:head + size])
    except (ValueError, UnicodeDecodeError):
        raise KVFileError("damaged header") from None
    if not isinstance(header, dict):
        raise KVFileError("damaged header")
    segment = check_header(header, model, start, head + size, len(data), layout, expect)
    payload = data[head + size:]
    if hashlib.blake2b(payload, digest_size=32).hexdigest() != header.get("checksum"):
        raise KVFileError("the bytes do not match their checksum")
    return segment


def check_header(header: dict, model: str, start: int, payload_offset: int, total: int,
                 layout: KVLayout | None = None, expect: list[str] | None = None) -> Segment:
    """A parsed header checked against what the reader knows (the model,
    the first position, the file's size, the model's KV layout and, given
    `expect`, the first blocks' chain hashes), without its payload."""
    if header.get("version") != VERSION:
        raise KVFileError("another format version")
    if header.get("model") != model:
        raise KVFileError("another model's KV")
    blocks = header.get("blocks")
    if not isinstance(blocks, list) or (expect is not None and not (
            expect and len(expect) <= len(blocks) and blocks[:len(expect)] == list(expect))):
        raise KVFileError("KV of other tokens")
    segment = _layout(header, start, payload_offset, total)
    if layout is not None:
        _check_shapes(segment, layout)
    return segment


def _layout(header: dict, expect_start: int, payload_offset: int, total: int) -> Segment:
    """The arrays' places, each checked against the payload's size."""
    start, count, dtype = header.get("start"), header.get("count"), header.get("dtype")
    block, blocks, arrays = header.get("block"), header["blocks"], header.get("arrays")
    if not (type(start) is int and type(count) is int and type(block) is int
            and start == expect_start and 0 < block <= 1 << 16
            and count == block * len(blocks)):
        raise KVFileError("positions that do not match the tokens")
    if dtype not in DTYPES or not isinstance(arrays, list) or not arrays or len(arrays) % 2:
        raise KVFileError("damaged array list")
    width, at, out = DTYPES[dtype][1], 0, []
    for entry in arrays:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list)
                and len(entry[0]) == 4 and all(type(d) is int and 0 < d < 1 << 24
                                               for d in entry[0])
                and entry[0][0] == 1 and entry[0][2] == count and entry[1] == at):
            raise KVFileError("damaged array list")
        shape = tuple(entry[0])
        at += int(np.prod(shape, dtype=np.int64)) * width
        out.append((shape, entry[1]))
    if payload_offset + at != total:
        raise KVFileError("truncated or padded payload")
    return Segment(header["model"], start, count, block, tuple(blocks), dtype, tuple(out),
                   payload_offset)


def _check_shapes(segment: Segment, layout: KVLayout) -> None:
    """Every array is the model's: one keys and one values per layer, each
    (1, KV heads, positions, head size)."""
    if len(segment.arrays) != 2 * layout.layers:
        raise KVFileError(f"KV of {len(segment.arrays) // 2} layers; the model has "
                          f"{layout.layers}")
    for i, (shape, _) in enumerate(segment.arrays):
        heads, size = layout.values if i % 2 else layout.keys
        if shape != (1, heads, segment.count, size):
            raise KVFileError(f"arrays of shape {list(shape)}; the model's "
                              f"{'values' if i % 2 else 'keys'} are "
                              f"[1, {heads}, {segment.count}, {size}]")


def decode(data: bytes, model: str, start: int, expect: list[str],
           layout: KVLayout | None = None) -> list:
    """[(keys, values)] as MLX arrays from a segment's bytes, after `check`
    (against `layout` when given): the positions of its first len(expect)
    blocks. Values that are not finite, or an array of nothing but zeros,
    are refused (KVFileError) before MLX sees them."""
    import mlx.core as mx

    segment = check(data, model, start, expect, layout)
    used = len(expect) * segment.block
    np_dtype, width = DTYPES[segment.dtype]
    raws = []
    for shape, offset in segment.arrays:
        n = int(np.prod(shape, dtype=np.int64))
        raw = np.frombuffer(data, np_dtype, n, segment.payload_offset + offset).reshape(shape)
        raws.append(np.ascontiguousarray(raw[:, :, :used]))
        _check_values(raws[-1], segment.dtype)
    arrays = []
    for raw in raws:
        array = mx.array(raw)
        arrays.append(array.view(mx.bfloat16) if segment.dtype == "bfloat16" else array)
    return list(zip(arrays[0::2], arrays[1::2]))


def _check_values(raw: np.ndarray, dtype: str) -> None:
    """KV a model wrote is finite and not all zeros (a zeroed or garbage
    payload with its checksum recomputed is not). bfloat16 is checked on its
    bits: exponent all ones is inf or NaN; sign aside, zero is zero."""
    if dtype == "bfloat16":
        finite = not np.any((raw & 0x7F80) == 0x7F80)
        blank = not np.any(raw & 0x7FFF)
    else:
        finite, blank = bool(np.isfinite(raw).all()), not np.any(raw)
    if not finite:
        raise KVFileError("values that are not finite (NaN or inf)")
    if blank:
        raise KVFileError("an array of nothing but zeros")


def write(path: str | Path, data: bytes) -> None:
    """`data` at `path`, atomically (a reader sees the whole file or none);
    readable by this user only."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".kv-", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
