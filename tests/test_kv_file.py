"""The disk tier's segment files (issue 33, engine/runtime/kv_file.py): real
KV from the tiny model written and read back bit for bit in each dtype;
damaged, truncated, foreign and other-version files refused with a reason
before any MLX call; fuzzed with hypothesis, every mutated file decoded in a
child process, so a crash fails the test instead of killing pytest."""

from __future__ import annotations

import json
import os
import stat
import struct
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mlx_lm.models.cache import make_prompt_cache

from engine.runtime import kv_file
from engine.runtime.disk_tier import chain_hashes
from engine.runtime.kv_file import KVFileError, check, decode, encode, write
from tests.helpers import prompt_of

ROOT = Path(__file__).resolve().parent.parent
MODEL = "tiny-llama:float32:test"
B = 4  # positions per block


def real_kv(tiny_loaded, dtype=mx.float32):
    """The tiny model's KV for a prompt, whole blocks of it: [(keys, values)]
    per layer, and the blocks' chain hashes."""
    tokens = prompt_of(tiny_loaded, "the quick brown fox jumps over the lazy dog")
    tokens = tokens[:len(tokens) - len(tokens) % B]
    cache = make_prompt_cache(tiny_loaded.model)
    tiny_loaded.model(mx.array([tokens]), cache=cache)
    # (mlx-lm's KVCache.state is its whole buffer, steps of 256: cut at the offset.)
    layers = [(c.keys[:, :, :c.offset].astype(dtype), c.values[:, :, :c.offset].astype(dtype))
              for c in cache]
    mx.eval(layers)
    return layers, chain_hashes(tokens, B)


@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16])
def test_a_segment_reads_back_bit_for_bit(tiny_loaded, tmp_path, dtype):
    layers, hashes = real_kv(tiny_loaded, dtype)
    path = tmp_path / "seg.kv"
    write(path, encode(MODEL, 0, B, hashes, layers))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".kv-")]
    back = decode(path.read_bytes(), MODEL, 0, hashes)
    assert len(back) == len(layers)
    for (k0, v0), (k1, v1) in zip(layers, back):
        assert k1.dtype == dtype and k1.shape == k0.shape
        assert mx.array_equal(k0, k1).item() and mx.array_equal(v0, v1).item()
    # Its first two blocks alone (a prefix of what it holds).
    first = decode(path.read_bytes(), MODEL, 0, hashes[:2])
    assert first[0][0].shape[2] == 2 * B
    assert mx.array_equal(first[0][0], layers[0][0][:, :, :2 * B]).item()
    # A later segment of the same prefix: positions start .. end.
    tail = [(k[:, :, B:, :], v[:, :, B:, :]) for k, v in layers]
    segment = check(encode(MODEL, B, B, hashes[1:], tail, hashes[0]), MODEL, B, hashes[1:])
    assert (segment.start, segment.count) == (B, len(hashes) * B - B)


def test_foreign_and_damaged_files_are_refused_with_a_reason(tiny_loaded):
    layers, hashes = real_kv(tiny_loaded)
    data = encode(MODEL, 0, B, hashes, layers)
    cases = {
        "not a Tandem KV file": b"GGUF" + data[4:],
        "another model's KV": data,  # read as another model
        "KV of other tokens": data,  # read for other tokens
        "truncated or damaged header": data[:12],
        "truncated or padded payload": data[:-1],
        "checksum": data[:-1] + bytes([data[-1] ^ 1]),
    }
    for why, blob in cases.items():
        model = "another-model" if why == "another model's KV" else MODEL
        expect = hashes[:1] + ["0" * 64] if why == "KV of other tokens" else hashes
        with pytest.raises(KVFileError, match=why):
            check(blob, model, 0, expect)
    with pytest.raises(KVFileError, match="positions"):  # read as if it started later
        check(data, MODEL, B, hashes)
    # Another version: the header says so (a valid file of version 2).
    (size,) = struct.unpack("<I", data[8:12])
    header = json.loads(data[12:12 + size])
    header["version"] = 2
    raw = json.dumps(header).encode()
    other = kv_file.MAGIC + struct.pack("<I", len(raw)) + raw + data[12 + size:]
    with pytest.raises(KVFileError, match="another format version"):
        check(other, MODEL, 0, hashes)


# Decodes each file given (its bytes, the model, the tokens in a JSON file
# beside it) and prints one JSON line per file: "ok", or the KVFileError.
_WORKER = """
import json, sys
from pathlib import Path
from engine.runtime.kv_file import KVFileError, decode
meta = json.loads(Path(sys.argv[1]).read_text())
for path in sys.argv[2:]:
    try:
        decode(Path(path).read_bytes(), meta["model"], 0, meta["hashes"])
        outcome = "ok"
    except KVFileError as e:
        outcome = str(e)
    print(json.dumps({"path": path, "outcome": outcome}), flush=True)
"""


def decode_in_children(meta: Path, paths: list[str]) -> dict[str, object]:
    """decode() on each file in a child process; a child that dies is
    recorded against the file it was reading, and a new child takes the rest."""
    outcomes: dict[str, object] = {}
    todo = list(paths)
    while todo:
        proc = subprocess.run([sys.executable, "-c", _WORKER, str(meta), *todo], cwd=ROOT,
                              capture_output=True, text=True, timeout=240)
        done = [json.loads(line) for line in proc.stdout.splitlines()]
        outcomes.update((o["path"], o["outcome"]) for o in done)
        if proc.returncode == 0:
            break
        crashed = todo[len(done)]
        outcomes[crashed] = {"rc": proc.returncode, "stderr": proc.stderr[-2000:]}
        todo = todo[len(done) + 1:]
    return outcomes


MUTATIONS = st.lists(st.tuples(st.sampled_from(["flip", "cut", "insert", "zero"]),
                               st.floats(0, 1), st.integers(0, 255)), min_size=1, max_size=4)


def mutate(data: bytes, steps) -> bytes:
    out = bytearray(data)
    for kind, where, byte in steps:
        if not out:
            break
        at = min(int(where * len(out)), len(out) - 1)
        if kind == "flip":
            out[at] ^= byte or 1
        elif kind == "cut":
            del out[at:]
        elif kind == "insert":
            out[at:at] = bytes([byte])
        else:
            out[at:at + 8] = bytes(len(out[at:at + 8]))
    return bytes(out)


def test_fuzzed_files_never_crash_and_are_never_used(tiny_loaded, tmp_path):
    layers, hashes = real_kv(tiny_loaded, mx.bfloat16)
    data = encode(MODEL, 0, B, hashes, layers)
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({"model": MODEL, "hashes": hashes}))
    paths: list[str] = []

    @settings(max_examples=120, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(MUTATIONS)
    def collect(steps):
        mutated = mutate(data, steps)
        if mutated != data:
            path = tmp_path / f"m{len(paths)}.kv"
            path.write_bytes(mutated)
            paths.append(str(path))

    collect()
    # Header fields rewritten with a valid checksum-free layout: the layout checks.
    (size,) = struct.unpack("<I", data[8:12])
    header = json.loads(data[12:12 + size])
    for field, value in (("arrays", [[[1, 2, 10 ** 9, 16], 0]] * 2), ("count", -1),
                         ("dtype", "int8"), ("start", 10 ** 12), ("arrays", "x"),
                         ("block", 0), ("block", 10 ** 9), ("blocks", hashes * 2)):
        bad = dict(header, **{field: value})
        raw = json.dumps(bad).encode()
        path = tmp_path / f"h{len(paths)}.kv"
        path.write_bytes(kv_file.MAGIC + struct.pack("<I", len(raw)) + raw + data[12 + size:])
        paths.append(str(path))
    assert len(paths) > 100
    outcomes = decode_in_children(meta, paths)
    crashed = {p: o for p, o in outcomes.items() if isinstance(o, dict)}
    assert not crashed, crashed
    used = [p for p, o in outcomes.items() if o == "ok"]
    assert not used, used  # a changed file is never taken for the real one
    assert len(outcomes) == len(paths)
    assert all(isinstance(o, str) and o for o in outcomes.values())


def test_encode_refuses_what_it_cannot_write(tiny_loaded):
    layers, hashes = real_kv(tiny_loaded)
    with pytest.raises(ValueError):
        encode(MODEL, 0, B, hashes[:-1], layers)  # one hash per block
    with pytest.raises(ValueError):
        encode(MODEL, 0, B, hashes, [])
    with pytest.raises(ValueError):
        encode(MODEL, 0, B, hashes, [(layers[0][0].astype(mx.int32), layers[0][1])])
    assert np.isfinite(np.array(layers[0][0])).all()
