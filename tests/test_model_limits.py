"""Model files that would eat the machine (issue 19): absurd counts, zero or
negative sizes, bad constants, NaN weights and files far larger than memory,
as GGUF files and as model folders. Each is refused with a clear message
naming what is wrong: no traceback, no signal, no hang, no memory blow-up.
All load in one child process, which reports each outcome, its time and the
process's peak memory."""

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import pytest

from engine import EngineError
from engine.models.config_check import check_config, check_fits
from tests.test_gguf import write_gguf

ROOT = Path(__file__).resolve().parents[1]

# field -> the values to try, each one model folder (and GGUF where it has the key)
ABSURD = {
    "num_hidden_layers": [10**9, 0],
    "hidden_size": [0, 10**9],
    "num_attention_heads": [0, 3],
    "num_key_value_heads": [3, 0],
    "vocab_size": [10**9],
    "intermediate_size": [10**9, 0],
    "max_position_embeddings": [-5, 0],
    "rms_norm_eps": [-1.0, 0.0],
    "rope_theta": [0.0],
}
GGUF_KEYS = {"num_hidden_layers": "block_count", "hidden_size": "embedding_length",
             "num_attention_heads": "attention.head_count",
             "num_key_value_heads": "attention.head_count_kv", "vocab_size": "vocab_size",
             "intermediate_size": "feed_forward_length",
             "max_position_embeddings": "context_length",
             "rms_norm_eps": "attention.layer_norm_rms_epsilon", "rope_theta": "rope.freq_base"}
FOLDER_ONLY = {
    "num_hidden_layers": ["abc", True],
    "rms_norm_eps": [float("nan")],
    "vocab_size": [None],
}

_WORKER = """
import json, sys, time
from engine import EngineError, load_model
for path in sys.argv[1:]:
    started = time.perf_counter()
    try:
        load_model(path)
        outcome = {"loaded": True}
    except EngineError as e:
        outcome = {"kind": e.kind, "error": str(e)}
    outcome["seconds"] = time.perf_counter() - started
    # VmHWM: this process's peak since its exec (ru_maxrss would count the
    # parent's pages at the fork too)
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
    outcome["peak_mib"] = int(hwm.split()[1]) / 1024
    print(json.dumps({"path": path, **outcome}), flush=True)
"""


def _folder(base: Path, tmp: Path, name: str, **config) -> Path:
    folder = Path(shutil.copytree(base, tmp / name))
    data = json.loads((folder / "config.json").read_text())
    for key, value in config.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    (folder / "config.json").write_text(json.dumps(data))
    return folder


def _nan_weights(folder: Path) -> Path:
    weights = mx.load(str(folder / "model.safetensors"))
    weights = {k: (mx.full(v.shape, float("nan"), v.dtype) if "embed" in k else v)
               for k, v in weights.items()}
    mx.save_safetensors(str(folder / "model.safetensors"), weights)
    return folder


@pytest.fixture(scope="module")
def cases(tmp_path_factory, tiny_model_dir) -> dict[str, tuple[Path, str, str]]:
    """name -> (path, the error kind, a word the message must contain)."""
    tmp = tmp_path_factory.mktemp("limits")
    out = {}
    for field, values in ABSURD.items():
        for value in values:
            name = f"{field}={value}"
            folder = _folder(tiny_model_dir, tmp, f"hf-{name}", **{field: value})
            out[f"hf {name}"] = (folder, "corrupt-model", field)
            gguf = write_gguf(tiny_model_dir, tmp / f"{name}.gguf",
                              overrides={GGUF_KEYS[field]: value})
            out[f"gguf {name}"] = (gguf, "corrupt-model", field)
    for field, values in FOLDER_ONLY.items():
        for value in values:
            name = f"{field}={value}"
            out[f"hf {name}"] = (_folder(tiny_model_dir, tmp, f"hf-{name}", **{field: value}),
                                 "corrupt-model", field)
    bad_json = _folder(tiny_model_dir, tmp, "hf-not-an-object")
    (bad_json / "config.json").write_text("[1, 2, 3]")
    out["hf config is a list"] = (bad_json, "corrupt-model", "config")
    deep = _folder(tiny_model_dir, tmp, "hf-deep")
    (deep / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    out["hf config nested 100,000 deep"] = (deep, "corrupt-model", "config")
    nan = _nan_weights(_folder(tiny_model_dir, tmp, "hf-nan"))
    out["hf NaN weights"] = (nan, "corrupt-model", "NaN")
    out["gguf NaN weights"] = (write_gguf(nan, tmp / "nan.gguf"), "corrupt-model", "NaN")
    huge = _folder(tiny_model_dir, tmp, "hf-huge")
    with open(huge / "model-00002-of-00002.safetensors", "wb") as f:
        f.truncate(1 << 40)  # a sparse terabyte: no disk, but far more than memory
    out["hf weights far larger than memory"] = (huge, "too-large-for-memory", "memory")
    out["hf valid"] = (tiny_model_dir, "", "")
    return out


@pytest.fixture(scope="module")
def outcomes(cases) -> dict[str, dict]:
    paths = [str(p) for p, _, _ in cases.values()]
    proc = subprocess.run([sys.executable, "-c", _WORKER, *paths], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    by_path = {o["path"]: o for o in map(json.loads, proc.stdout.splitlines())}
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {name: by_path[str(p)] for name, (p, _, _) in cases.items()}


def test_every_damaged_model_is_refused_clearly_fast_and_small(cases, outcomes):
    assert len(cases) >= 30
    for name, (path, kind, word) in cases.items():
        outcome = outcomes[name]
        assert outcome["seconds"] < 10, (name, outcome)
        if not kind:
            assert outcome.get("loaded"), (name, outcome)
            continue
        assert outcome.get("kind") == kind, (name, outcome)
        assert word in outcome["error"], (name, outcome)
        assert "Traceback" not in outcome["error"]
    assert max(o["peak_mib"] for o in outcomes.values()) < 1024


def test_bounds_let_real_models_through():
    """Llama 3.1 8B's shape, a 262k vocabulary and a 1M-token context pass."""
    llama8b = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
               "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
               "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 5e5}
    check_config(llama8b, "llama 3.1 8b")
    check_config(dict(llama8b, vocab_size=262_144, max_position_embeddings=1 << 20), "big")
    check_config({"model_type": "gemma3", "text_config": dict(llama8b, head_dim=256)}, "nested")
    with pytest.raises(EngineError, match="rms_norm_eps"):
        check_config(dict(llama8b, rms_norm_eps=math.inf), "inf")
    with pytest.raises(EngineError, match="memory"):
        check_fits(8 << 30, "an 8 GiB model", available=4 << 30)
    check_fits(1 << 30, "a 1 GiB model", available=4 << 30)
