"""The GGUF path: a tiny llama written as GGUF the way llama.cpp's converter
does (Q/K permuted for interleaved RoPE, tokenizer in metadata) must give the
same greedy tokens as the same model loaded from its Hugging Face folder."""

import json

import mlx.core as mx
import pytest

from engine import EngineError, load_model
from tests.gguf_files import gguf_tensors
from tests.helpers import prompt_of, reference_greedy
from tests.tiny_model import CHAT_TEMPLATE


def write_gguf(folder, path, architecture="llama", overrides: dict | None = None):
    """The folder's model as a GGUF; `overrides` replace metadata values
    (keys without the architecture prefix, e.g. "block_count")."""
    config = json.loads((folder / "config.json").read_text())
    tok = json.loads((folder / "tokenizer.json").read_text())
    out = gguf_tensors(folder, architecture)
    vocab = tok["model"]["vocab"]
    added = {t["content"]: t["id"] for t in tok["added_tokens"]}
    tokens = [None] * (max(list(vocab.values()) + list(added.values())) + 1)
    for t, i in {**vocab, **added}.items():
        tokens[i] = t
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    token_type = [3 if t in added else 1 for t in tokens]
    u32 = lambda v: mx.array(v, dtype=mx.uint32)  # noqa: E731
    metadata = {
        "general.architecture": architecture,
        f"{architecture}.embedding_length": u32(config["hidden_size"]),
        f"{architecture}.block_count": u32(config["num_hidden_layers"]),
        f"{architecture}.feed_forward_length": u32(config["intermediate_size"]),
        f"{architecture}.attention.head_count": u32(config["num_attention_heads"]),
        f"{architecture}.attention.head_count_kv": u32(config["num_key_value_heads"]),
        f"{architecture}.attention.layer_norm_rms_epsilon": mx.array(config["rms_norm_eps"]),
        f"{architecture}.rope.freq_base": mx.array(config["rope_theta"]),
        f"{architecture}.context_length": u32(config["max_position_embeddings"]),
        **({f"{architecture}.attention.key_length": u32(config["head_dim"])}
           if "head_dim" in config else {}),
        **({f"{architecture}.attention.sliding_window": u32(config["sliding_window"]),
            f"{architecture}.attention.sliding_window_pattern":
                u32(config["sliding_window_pattern"])}
           if config.get("sliding_window") else {}),
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.token_type": mx.array(token_type, dtype=mx.int32),
        "tokenizer.ggml.eos_token_id": u32(added["<|im_end|>"]),
        "tokenizer.ggml.bos_token_id": u32(added["<|im_start|>"]),
        "tokenizer.chat_template": CHAT_TEMPLATE,
    }
    for key, value in (overrides or {}).items():
        metadata[f"{architecture}.{key}"] = (
            mx.array(value) if isinstance(value, float) else
            mx.array(value, dtype=mx.uint32 if value >= 0 else mx.int32))
    mx.save_gguf(str(path), out, metadata)
    return path


def test_gguf_matches_hf_folder(tiny_model_dir, tiny_loaded, tmp_path):
    path = write_gguf(tiny_model_dir, tmp_path / "tiny.gguf")
    loaded = load_model(str(path), weight_format="float32")
    text = "hello world, how are you today?"
    ids = prompt_of(loaded, text)
    assert ids == prompt_of(tiny_loaded, text)  # tokenizer rebuilt from metadata
    assert loaded.context_length == 512
    assert reference_greedy(loaded, ids, 20) == reference_greedy(tiny_loaded, ids, 20)


@pytest.mark.parametrize("family, arch", [("qwen2", "qwen2"), ("qwen3", "qwen3"),
                                          ("phi3", "phi3"), ("gemma3_text", "gemma3")])
def test_gguf_of_other_families_matches_their_folders(family, arch, tmp_path):
    from tests.families import build_family

    folder = build_family(family, tmp_path / family)
    from_folder = load_model(str(folder))
    path = write_gguf(folder, tmp_path / f"{family}.gguf", architecture=arch)
    loaded = load_model(str(path), weight_format="float32")
    assert type(loaded.model).__module__ == type(from_folder.model).__module__
    ids = prompt_of(loaded, "the quick brown fox jumps over the lazy dog")
    assert ids == prompt_of(from_folder, "the quick brown fox jumps over the lazy dog")
    assert reference_greedy(loaded, ids, 16) == reference_greedy(from_folder, ids, 16)


def test_gguf_unsupported_architecture(tiny_model_dir, tmp_path):
    path = write_gguf(tiny_model_dir, tmp_path / "mamba.gguf", architecture="mamba")
    with pytest.raises(EngineError, match="Unsupported model architecture 'mamba'") as info:
        load_model(str(path))
    assert info.value.kind == "unsupported-architecture"
