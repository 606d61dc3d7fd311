"""GGUF tokenizers: each pre-split rule llama.cpp names splits text as that
rule does (digits, contractions, camel case), and an unknown rule is a clear
error instead of GPT-2's rule (wrong tokens)."""

import pytest

from engine.errors import EngineError
from engine.gguf_tokenizer import PRE_RULES, pre_tokenizer

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
