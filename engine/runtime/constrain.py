"""Constrained decoding with llguidance (the grammar engine llama.cpp and vLLM
use): a request with a `Grammar` gets a matcher; before each of its tokens is
sampled, the matcher's bitmask of allowed tokens masks that row's logits.

Why llguidance (benchmarks/grammar_engines.py, RESULTS.md): it builds a JSON
schema's grammar in ~2 ms and a mask in ~0.02 ms per token on a 49k
vocabulary, whatever the schema; outlines-core compiles an index per schema
up front (0.07 s for a small schema, 5.7 s for "any object"), too slow for
schemas that arrive with each request. xgrammar's Linux wheel needs torch.

Masks apply per row inside the batch: free rows are untouched and keep their
pipelining; a constrained row needs the token it feeds on the host before its
next mask, read while the device runs the step's forward pass (batch.py).
The mask is applied to the logits the sampler sees; logprobs stay the raw
model's (sampling.py).
"""

from __future__ import annotations

import json
import threading

import mlx.core as mx
import numpy as np

from ..core.errors import EngineError
from ..core.params import Grammar

_ALLOW_ALL = -1  # every bit set: a free row


def grammar_text(grammar: Grammar) -> str:
    """The llguidance grammar for `grammar` (ValueError when it is not valid).
    JSON comes out compact (", " and ": " between items, no other
    whitespace), unless the schema's own "x-guidance" options say otherwise:
    free whitespace lets a weak model pad its answer until max_tokens."""
    import llguidance

    text = grammar.text
    if grammar.kind == "json_schema":
        schema = json.loads(text)
        if isinstance(schema, dict) and "x-guidance" not in schema:
            text = json.dumps({**schema, "x-guidance": {"whitespace_flexible": False}})
    return llguidance.grammar_from(grammar.kind, text)


class Constraints:
    """The model's llguidance tokenizer (built once, ~0.4 s, on first use)
    and a matcher per constrained request."""

    def __init__(self, hf_tokenizer, stop_token_ids: set[int], vocab_size: int):
        self._hf = hf_tokenizer
        self._stops = sorted(stop_token_ids)
        self.vocab_size = vocab_size
        self._tokenizer = None
        self._lock = threading.Lock()

    def _llg_tokenizer(self):
        with self._lock:
            if self._tokenizer is None:
                import llguidance.hf

                try:
                    self._tokenizer = llguidance.hf.from_tokenizer(
                        self._hf, n_vocab=self.vocab_size, eos_token=self._stops or None)
                except Exception as e:
                    raise EngineError(f"This model's tokenizer cannot drive constrained "
                                      f"decoding: {e}", "bad-argument") from None
            return self._tokenizer

    def check(self, grammar: Grammar) -> None:
        """Raise EngineError naming what is wrong with `grammar`."""
        if grammar.kind == "json_schema":
            try:
                json.loads(grammar.text)
            except ValueError as e:
                raise EngineError(f"The JSON schema is not valid JSON: {e}",
                                  "bad-argument") from None
        self.matcher(grammar)  # ~2 ms: the grammar is built, and its errors said

    def matcher(self, grammar: Grammar):
        import llguidance

        try:
            text = grammar_text(grammar)
        except Exception as e:
            raise EngineError(f"The {grammar.kind} grammar is not valid: {e}",
                              "bad-argument") from None
        matcher = llguidance.LLMatcher(self._llg_tokenizer(), text)
        if matcher.is_error():
            raise EngineError(f"The {grammar.kind} grammar is not valid: "
                              f"{matcher.get_error()}", "bad-argument")
        return matcher


def consume(matcher, token: int) -> None:
    """The matcher reads the token its row is fed (sampled under its mask)."""
    if not matcher.is_stopped() and not matcher.is_error():
        matcher.consume_token(token)


def row_masks(matchers: list, vocab: int) -> mx.array:
    """(B, V) booleans: the tokens each row may take next; every token for a
    row without a matcher (or a broken one); only a stop token once a row's
    grammar is complete."""
    from llguidance.numpy import fill_next_token_bitmask

    words = (vocab + 31) // 32
    bits = np.full((len(matchers), words), _ALLOW_ALL, dtype=np.int32)
    for i, matcher in enumerate(matchers):
        if matcher is not None and not matcher.is_error():
            # A finished grammar allows only the stop tokens (llguidance's mask).
            fill_next_token_bitmask(matcher, bits, i)
            if not bits[i].any():  # nothing allowed: never sample from -inf alone
                bits[i] = _ALLOW_ALL
    # The packed words go to the device (V/8 bytes a row, not V) and are
    # unpacked there: bit k of word w is token 32 w + k.
    words_mx = mx.array(bits.view(np.uint32))
    shifts = mx.arange(32, dtype=mx.uint32)
    unpacked = (words_mx[:, :, None] >> shifts) & 1
    return unpacked.reshape(len(matchers), words * 32)[:, :vocab].astype(mx.bool_)
