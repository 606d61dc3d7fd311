"""Damaged GGUF files give a clear EngineError, never a crash.

`mx.load` segfaults on many damaged GGUF files, so every load here runs in a
child process: a crash fails the test for that file instead of killing pytest.
"""

import json
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from engine import EngineError
from engine.models.gguf.check import validate_gguf
from engine.models.loader import default_model_path
from tests.test_gguf import write_gguf

ROOT = Path(__file__).resolve().parent.parent
CLEAR = "is corrupt or not a supported GGUF file"
TENSOR_INFO_OFFSETS = (1_769_555, 1_775_000, 1_785_300)  # inside the default model's tensor infos

# Loads each path given and prints one JSON line per path, in order.
_WORKER = """
import json, sys
from engine import EngineError, load_model
for path in sys.argv[1:]:
    try:
        load_model(path)
        outcome = {"loaded": True}
    except EngineError as e:
        outcome = {"kind": e.kind, "error": str(e)}
    print(json.dumps({"path": path, **outcome}), flush=True)
"""


def load_in_children(paths: list[str]) -> dict[str, dict]:
    """load_model on each path in a child process. A child that dies (a
    segfault, or an exception other than EngineError) is recorded against the
    file it was loading, and a new child takes the rest: one startup when
    nothing crashes."""
    outcomes: dict[str, dict] = {}
    todo = list(paths)
    while todo:
        proc = subprocess.run([sys.executable, "-c", _WORKER, *todo], cwd=ROOT,
                              capture_output=True, text=True, timeout=240)
        done = [json.loads(line) for line in proc.stdout.splitlines()]
        outcomes.update((o["path"], o) for o in done)
        if proc.returncode == 0:
            break
        crashed = todo[len(done)]
        outcomes[crashed] = {"rc": proc.returncode, "stderr": proc.stderr[-3000:]}
        todo = todo[len(done) + 1:]
    return outcomes


def tiny_gguf(path: Path, tensor_type: str = "F32") -> Path:
    """A one-tensor GGUF of `tensor_type` (zero bytes), written by llama.cpp's writer."""
    qtype = GGMLQuantizationType[tensor_type]
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    rows, cols = 4, 256
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tensor("blk.0.ffn_down.weight",
                      np.zeros((rows, cols // block_size * type_size), np.uint8), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _patch(path: Path, offset: int, data: bytes) -> Path:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)
    return path


def _copy_default(tmp: Path, name: str) -> Path:
    return Path(shutil.copyfile(default_model_path(), tmp / name))


@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny_model_dir) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("damaged")
    rng = random.Random(1234)
    f = {}
    f["magic_random"] = tmp / "magic_random.gguf"
    f["magic_random"].write_bytes(b"GGUF" + rng.randbytes(64))
    # A valid version, then random counts: the header claims more than the file holds.
    f["v3_random"] = tmp / "v3_random.gguf"
    f["v3_random"].write_bytes(b"GGUF" + struct.pack("<I", 3) + rng.randbytes(60))
    for offset in TENSOR_INFO_OFFSETS:
        f[f"tensor_info_{offset}"] = _patch(_copy_default(tmp, f"ti_{offset}.gguf"),
                                            offset, rng.randbytes(256))
    size = default_model_path().stat().st_size
    f["truncated_half"] = tmp / "truncated_half.gguf"
    with open(default_model_path(), "rb") as src:
        f["truncated_half"].write_bytes(src.read(size // 2))
    # The real model, intact but for its version: mx.load would read it as is.
    f["version_9"] = _patch(_copy_default(tmp, "version_9.gguf"), 4, struct.pack("<I", 9))
    f["q3_k"] = tiny_gguf(tmp / "q3_k.gguf", "Q3_K")
    # The type field of the only tensor info: after its name, n_dims and 2 dims.
    unknown = tiny_gguf(tmp / "unknown_type.gguf")
    name = b"blk.0.ffn_down.weight"
    type_at = unknown.read_bytes().index(name) + len(name) + 4 + 2 * 8
    f["unknown_type"] = _patch(unknown, type_at, struct.pack("<I", 200))
    f["empty"] = tmp / "empty.gguf"
    f["empty"].write_bytes(b"")
    f["zeros"] = tmp / "zeros.gguf"
    f["zeros"].write_bytes(bytes(4096))
    f["tiny_valid"] = write_gguf(tiny_model_dir, tmp / "tiny_valid.gguf")
    return f


@pytest.fixture(scope="module")
def outcomes(files) -> dict[str, dict]:
    by_path = load_in_children([str(p) for p in files.values()] + ["default"])
    return {name: by_path[str(p)] for name, p in files.items()} | {"default": by_path["default"]}


def _assert_clear(outcome: dict, detail: str, kind: str = "corrupt-model") -> None:
    assert "rc" not in outcome, (
        f"the load crashed (rc {outcome['rc']}) instead of raising EngineError:\n"
        f"{outcome['stderr']}")
    assert outcome.get("kind") == kind, outcome
    assert detail in outcome["error"], outcome["error"]


def test_magic_then_random_bytes(outcomes):
    _assert_clear(outcomes["magic_random"], f"{CLEAR}: unsupported GGUF version")
    _assert_clear(outcomes["v3_random"], f"{CLEAR}: the header claims")


@pytest.mark.parametrize("offset", TENSOR_INFO_OFFSETS)
def test_random_bytes_in_tensor_infos(outcomes, offset):
    _assert_clear(outcomes[f"tensor_info_{offset}"], CLEAR)


def test_truncated_model(outcomes):
    _assert_clear(outcomes["truncated_half"], "lies past the end of the file")


def test_wrong_version(outcomes):
    _assert_clear(outcomes["version_9"], f"{CLEAR}: unsupported GGUF version 9")


def test_unsupported_tensor_type(outcomes):
    _assert_clear(outcomes["q3_k"],
                  "unsupported tensor type Q3_K in tensor 'blk.0.ffn_down.weight'")


def test_unknown_tensor_type(outcomes):
    _assert_clear(outcomes["unknown_type"],
                  "unknown tensor type 200 in tensor 'blk.0.ffn_down.weight'")


def test_empty_and_zero_files(outcomes):
    _assert_clear(outcomes["empty"], "is not a GGUF model file", kind="not-a-model")
    _assert_clear(outcomes["zeros"], "is not a GGUF model file", kind="not-a-model")


def test_valid_files_still_load(outcomes):
    assert outcomes["default"] == {"path": "default", "loaded": True}
    assert outcomes["tiny_valid"].get("loaded"), outcomes["tiny_valid"]


@pytest.mark.parametrize("tensor_type", ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q8_0"])
def test_supported_types_pass_validation(tmp_path, tensor_type):
    validate_gguf(tiny_gguf(tmp_path / "ok.gguf", tensor_type))


def test_validation_reads_only_headers():
    import time

    start = time.perf_counter()
    validate_gguf(default_model_path())
    assert time.perf_counter() - start < 0.3


def test_cli_reports_damage(files):
    damaged = files["tensor_info_1769555"]
    proc = subprocess.run([sys.executable, "-m", "app", "generate", "--model", str(damaged), "hi"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"tandem: {damaged} {CLEAR}" in proc.stderr
    assert "Traceback" not in proc.stderr

