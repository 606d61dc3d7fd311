"""Model loading: the real loaders, and clear errors for bad input."""

import json
import shutil

import pytest

from engine import EngineError, load_model
from engine.models.loader import default_model_path


def test_loads_hf_folder(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir))
    assert loaded.context_length == 512
    assert loaded.tokenizer.convert_tokens_to_ids("<|im_end|>") in loaded.stop_token_ids


def test_missing_path(tmp_path):
    with pytest.raises(EngineError, match="not found") as info:
        load_model(str(tmp_path / "nope" / "model.gguf"))
    assert info.value.kind == "model-not-found"
    with pytest.raises(EngineError, match="not found"):
        load_model("./no/such/folder/anywhere")


def test_folder_without_model(tmp_path):
    (tmp_path / "readme.txt").write_text("hello")
    with pytest.raises(EngineError, match="not a model folder") as info:
        load_model(str(tmp_path))
    assert info.value.kind == "not-a-model"


def test_not_a_gguf_file(tmp_path):
    bogus = tmp_path / "weights.gguf"
    bogus.write_bytes(b"PK\x03\x04 this is a zip, not a model")
    with pytest.raises(EngineError, match="not a GGUF") as info:
        load_model(str(bogus))
    assert info.value.kind == "not-a-model"


def test_truncated_gguf(tmp_path):
    src = default_model_path()
    broken = tmp_path / "truncated.gguf"
    with open(src, "rb") as f:
        broken.write_bytes(f.read(1_000_000))
    with pytest.raises(EngineError, match="corrupt|truncated") as info:
        load_model(str(broken))
    assert info.value.kind == "corrupt-model"


def test_corrupt_folder_weights(tiny_model_dir, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "model.safetensors").write_bytes(b"\x00" * 100)
    with pytest.raises(EngineError) as info:
        load_model(str(folder))
    assert info.value.kind == "corrupt-model"


def test_unsupported_architecture(tiny_model_dir, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "no-such-architecture"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(EngineError, match="no-such-architecture") as info:
        load_model(str(folder))
    assert info.value.kind == "unsupported-architecture"


def test_repo_id_offline_without_cache():
    with pytest.raises(EngineError, match="Cannot load .* from Hugging Face") as info:
        load_model("tandem-tests/definitely-not-cached")
    assert info.value.kind == "download-failed"
