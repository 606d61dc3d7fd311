"""A fast tokenizer rebuilt from a GGUF's vocabulary and merges.

Transformers' own GGUF reader needs torch, which Tandem does not ship, so the
tokenizer is built here with the `tokenizers` library. The pre-tokenizer
(how text is split before BPE) follows `tokenizer.ggml.pre`, as llama.cpp
does; a rule Tandem does not know is an error, not a silent fallback to
GPT-2's rule (which would give wrong tokens). Encoding with special tokens
adds the BOS / EOS the file asks for (engine/models/gguf/vocab.py: llama.cpp's
rules); chat templates render with `add_special_tokens=False`, so a chat has
only the BOS its template spells.
"""

from __future__ import annotations

from typing import Any

from ...core.errors import EngineError
from .values import plain_metadata
from .vocab import read_vocab

# The split patterns llama.cpp uses (llama-vocab.cpp), by `tokenizer.ggml.pre`.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
           r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
           r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# rule name -> (split pattern, digits one by one before it)
PRE_RULES = {
    "default": (_GPT2, False), "gpt-2": (_GPT2, False), "gpt2": (_GPT2, False),
    "llama-bpe": (_LLAMA3, False), "llama3": (_LLAMA3, False),
    "qwen2": (_QWEN2, False), "qwen35": (_QWEN2, False),
    "smollm": (_GPT2, True),
    "tekken": (_TEKKEN, False), "mistral": (_TEKKEN, False),
}


def pre_tokenizer(rule: str):
    """The `tokenizers` pre-tokenizer for a llama.cpp pre-split rule name."""
    from tokenizers import Regex, pre_tokenizers

    if rule not in PRE_RULES:
        raise EngineError(
            f"The GGUF's tokenizer uses the pre-split rule '{rule}', which Tandem does not "
            f"know (known: {', '.join(sorted(PRE_RULES))}); loading it would give wrong "
            "tokens.", "unsupported-architecture")
    pattern, digits = PRE_RULES[rule]
    steps = [pre_tokenizers.Digits(individual_digits=True)] if digits else []
    steps += [pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
              pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    return pre_tokenizers.Sequence(steps)


def sentencepiece_tokenizer(tokens: list[str], vocab: dict[str, int], scores: list[float],
                            unk: str | None, space_prefix: bool):
    """SentencePiece BPE as llama.cpp runs it: spaces become '▁' (with one in
    front unless `add_space_prefix` is false, as for gemma), the adjacent pair
    whose merged piece scores highest merges first, and characters outside the
    vocabulary fall back to <0xXX> byte pieces. As a `tokenizers` BPE: merges
    ranked by the merged piece's score."""
    from tokenizers import Tokenizer, decoders, models, normalizers

    merges = []
    for merged in sorted(range(len(tokens)), key=lambda i: -scores[i]):
        piece = tokens[merged]
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                merges.append((left, right, scores[merged], vocab[left], vocab[right]))
    # Ties: the higher score first, then as SentencePiece orders pieces.
    merges.sort(key=lambda m: (-m[2], m[3], m[4]))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(a, b) for a, b, *_ in merges],
                               unk_token=unk, fuse_unk=True, byte_fallback=True))
    steps = [normalizers.Prepend("▁")] if space_prefix else []
    tok.normalizer = normalizers.Sequence(steps + [normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
        + ([decoders.Strip(" ", 1, 0)] if space_prefix else []))
    return tok


def build_tokenizer(metadata: dict[str, Any]):
    """A transformers PreTrainedTokenizerFast from the GGUF vocabulary, adding
    BOS/EOS to a text (`add_special_tokens=True`) as llama.cpp does
    (engine/models/gguf/vocab.py); metadata from either GGUF reader."""
    from tokenizers import AddedToken, Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    metadata = plain_metadata(metadata)
    vocab_info = read_vocab(metadata)
    tokens, vocab = vocab_info.tokens, vocab_info.vocab
    if vocab_info.model == "gpt2":  # byte-level BPE: llama 3, qwen, smollm, mistral (tekken)
        merges = [tuple(m.split(" ", 1)) for m in vocab_info.merges]
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False,
                                   byte_fallback=False))
        tok.pre_tokenizer = pre_tokenizer(vocab_info.pre)
        tok.decoder = decoders.ByteLevel()
    else:  # "llama", SentencePiece BPE: gemma, llama 2, mistral v0.1-0.3
        tok = sentencepiece_tokenizer(tokens, vocab, vocab_info.scores,
                                      vocab_info.token("unk"), vocab_info.space_prefix)
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i, kind in enumerate(vocab_info.types)
                            if kind in (3, 4)])  # control, user-defined
    template = metadata.get("tokenizer.chat_template")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=vocab_info.token("bos"),
        eos_token=vocab_info.token("eos"),
        unk_token=vocab_info.token("unk"),
        pad_token=vocab_info.token("pad"),
        # transformers makes these a TemplateProcessing post-processor.
        add_bos_token=vocab_info.add_bos,
        add_eos_token=vocab_info.add_eos,
        chat_template=template if isinstance(template, str) else None,
        clean_up_tokenization_spaces=False,
    )
