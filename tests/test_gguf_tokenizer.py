"""GGUF tokenizers: each pre-split rule llama.cpp names splits text as that
rule does (digits, contractions, camel case), and an unknown rule is a clear
error instead of GPT-2's rule (wrong tokens)."""

import pytest

from engine.core.errors import EngineError
from engine.models.gguf.tokenizer import PRE_RULES, pre_tokenizer
from tests.gguf_files import llama_cpp_spm

TEXT = "HelloWorld it's 12345 tokens!\n\nok"


def _split(rule: str, text: str = TEXT) -> list[str]:
    pieces = pre_tokenizer(rule).pre_tokenize_str(text)
    return [p.replace("Ġ", " ").replace("Ċ", "\n") for p, _ in pieces]


def test_gpt2_keeps_numbers_and_words_whole():
    assert _split("gpt-2") == ["HelloWorld", " it", "'s", " 12345", " tokens", "!", "\n", "\n",
                               "ok"]
    assert _split("default") == _split("gpt-2")


def test_llama3_groups_digits_by_three_and_keeps_newlines_together():
    pieces = _split("llama-bpe")
    assert pieces[:4] == ["HelloWorld", " it", "'s", " "]
    assert "123" in pieces and "45" in pieces and "!\n\n" in pieces  # punctuation takes its newlines


def test_qwen2_and_smollm_split_every_digit():
    for rule in ("qwen2", "smollm"):
        pieces = _split(rule)
        assert [p.strip() for p in pieces if p.strip().isdigit()] == list("12345"), rule


def test_tekken_splits_camel_case():
    pieces = _split("tekken")
    assert pieces[:2] == ["Hello", "World"]
    assert [p for p in pieces if p.isdigit()] == list("12345")


def test_every_known_rule_builds():
    for rule in PRE_RULES:
        assert _split(rule)  # no rule raises or loses the text
        assert "".join(_split(rule)) == TEXT


def test_an_unknown_rule_is_a_clear_error():
    with pytest.raises(EngineError, match="pre-split rule 'deepseek-coder'.*wrong tokens") as e:
        pre_tokenizer("deepseek-coder")
    assert e.value.kind == "unsupported-architecture"


# ---- SentencePiece BPE (tokenizer.ggml.model "llama": gemma, llama 2, mistral v0.x) ----
PIECES = ["▁", "h", "e", "l", "o", "w", "r", "d", "a", "b", "c", "▁h", "he", "ll", "lo",
          "▁he", "llo", "▁hello", "▁w", "or", "▁wor", "ld", "▁world", "ab", "▁a", "abc",
          "▁abc", "é", "▁é"]


def _spm_metadata(prefix=True):
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + PIECES
    scores = [0.0] * 259 + [-float(i) for i in range(len(PIECES))]
    types = [2, 3, 3] + [6] * 256 + [1] * len(PIECES)
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": scores, "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.unknown_token_id": 0, "tokenizer.ggml.bos_token_id": 1,
            "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.add_space_prefix": prefix}


def _llama_cpp_spm(meta, text: str) -> list[int]:
    return llama_cpp_spm(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.scores"],
                         meta["tokenizer.ggml.add_space_prefix"], text)


@pytest.mark.parametrize("prefix", [True, False])
def test_sentencepiece_gguf_tokenizes_as_llama_cpp(prefix):
    from engine.models.gguf.tokenizer import build_tokenizer

    meta = _spm_metadata(prefix)
    tok = build_tokenizer(meta)
    for text in ["hello world", "hello", "abc ab a", "héllo wörld 東", "world hello  ab",
                 "ol leh", " hello"]:
        expected = _llama_cpp_spm(meta, text)
        assert tok.encode(text, add_special_tokens=False) == expected, text
        assert tok.decode(expected) == text  # bytes and spaces come back


def test_sentencepiece_agrees_with_llama_cpp_on_random_text():
    import random

    from engine.models.gguf.tokenizer import build_tokenizer

    rng = random.Random(0)
    for prefix in (True, False):
        meta = _spm_metadata(prefix)
        tok = build_tokenizer(meta)
        for _ in range(400):
            text = "".join(rng.choice("helowrdabc é東") for _ in range(rng.randint(1, 20)))
            assert tok.encode(text, add_special_tokens=False) == _llama_cpp_spm(meta, text), text


def test_an_unknown_tokenizer_model_is_a_clear_error():
    from engine.models.gguf.tokenizer import build_tokenizer

    with pytest.raises(EngineError, match="Unsupported GGUF tokenizer 'rwkv'"):
        build_tokenizer({"tokenizer.ggml.model": "rwkv", "tokenizer.ggml.tokens": ["a"]})
