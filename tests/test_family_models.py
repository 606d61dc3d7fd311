"""Tiny random models of each mlx-lm family in tests/families.py: they load
through mlx-lm and through Tandem's loader, make the family's own prompt
caches, and decode varied greedy text."""

from __future__ import annotations

import json

import mlx.core as mx
import pytest

from tests.families import CACHE_KINDS, FAMILIES, SLIDING_WINDOW, build_family, cache_kinds

# What each family's mlx-lm module makes (make_prompt_cache), written out so a
# change in mlx-lm or in the builder shows here.
EXPECTED_CACHE_KINDS = {
    "llama": ["KVCache"],
    "qwen2": ["KVCache"],
    "qwen3": ["KVCache"],
    "mistral": ["KVCache"],
    "phi3": ["KVCache"],
    "gemma3_text": ["KVCache", "RotatingKVCache"],
    "gpt_oss": ["KVCache", "RotatingKVCache"],
    "lfm2": ["ArraysCache", "KVCache"],
}
# mlx-lm module that serves each model_type (MODEL_REMAPPING: mistral -> llama).
MODULES = {name: name for name in FAMILIES} | {"mistral": "llama"}
N_TOKENS = 20
PROMPT = [{"role": "user", "content": "hello world, how are you today?"}]


@pytest.fixture(scope="module")
def families_root(tmp_path_factory):
    return tmp_path_factory.mktemp("families")


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, families_root):
    """(name, model folder, mlx-lm model, tokenizer), built and loaded once per family."""
    import mlx_lm

    name = request.param
    path = build_family(name, families_root / name)
    model, tokenizer = mlx_lm.load(str(path))
    return name, path, model, tokenizer


def _prompt_ids(tokenizer) -> list[int]:
    return tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True)


def _greedy(model, tokenizer) -> list[int]:
    """N_TOKENS greedy tokens from mlx-lm's stream_generate (default sampler: argmax).

    A random model emits <|im_end|> now and then (about 1 in 400 tokens);
    stop ids are off for the call so every family decodes all N_TOKENS.
    """
    from mlx_lm import stream_generate

    stop_ids = tokenizer.eos_token_ids
    tokenizer.eos_token_ids = set()
    try:
        return [r.token for r in stream_generate(model, tokenizer, _prompt_ids(tokenizer),
                                                 max_tokens=N_TOKENS)]
    finally:
        tokenizer.eos_token_ids = stop_ids


def test_families_cover_every_cache_kind():
    kinds = set().union(*map(set, EXPECTED_CACHE_KINDS.values()))
    assert kinds == {"KVCache", "RotatingKVCache", "ArraysCache"}
    assert CACHE_KINDS == EXPECTED_CACHE_KINDS


def test_saved_in_hugging_face_layout(family):
    name, path, _, _ = family
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == name
    assert config["max_position_embeddings"] == 512
    assert (path / "tokenizer.json").exists()
    weights = mx.load(str(path / "model.safetensors"))
    assert {w.dtype for w in weights.values()} == {mx.float32}


def test_mlx_lm_loads_the_family(family, record_property):
    name, _, model, _ = family
    assert type(model).__module__ == f"mlx_lm.models.{MODULES[name]}"
    kinds = cache_kinds(model)
    record_property("cache_kinds", kinds)
    print(f"{name}: {kinds}")
    assert kinds == EXPECTED_CACHE_KINDS[name]


def test_greedy_output_is_varied(family):
    name, _, model, tokenizer = family
    tokens = _greedy(model, tokenizer)
    assert len(tokens) == N_TOKENS
    assert len(set(tokens)) >= 5, f"{name} greedy output barely varies: {tokens}"
    if "RotatingKVCache" in EXPECTED_CACHE_KINDS[name]:
        # The sliding-window caches wrap around within the test.
        assert len(_prompt_ids(tokenizer)) + N_TOKENS > SLIDING_WINDOW


def test_tandem_loader_loads_the_family(family):
    from engine.models.loader import load_model

    name, path, model, tokenizer = family
    loaded = load_model(str(path))
    assert type(loaded.model).__module__ == f"mlx_lm.models.{MODULES[name]}"
    assert loaded.context_length == 512
    assert loaded.weight_format == "float32"
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in loaded.stop_token_ids
    assert cache_kinds(loaded.model) == EXPECTED_CACHE_KINDS[name]
    # Same weights, same greedy text as mlx-lm's own load.
    assert _greedy(loaded.model, loaded.tokenizer) == _greedy(model, tokenizer)
