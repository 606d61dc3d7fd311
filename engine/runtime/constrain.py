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
from typing import Callable

import mlx.core as mx
import numpy as np

from ..core.errors import EngineError
from ..core.params import Grammar
from ..core.schema_check import SchemaError, check_bounds, check_satisfiable
from .grammar_build import BUILD_TIMEOUT_S, GrammarBuilder

_ALLOW_ALL = -1  # every bit set: a free row
GRAMMAR_NAMES = {"json_schema": "JSON schema", "regex": "regular expression",
                 "lark": "Lark grammar", "choice": "list of choices"}


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


# llguidance's own work limits, tighter than its defaults where a hostile
# grammar could stall a lane's step: a mask (computed on the lane thread,
# per constrained row and token) gets at most ~5 ms of lexer and parser work.
def _limits():
    import llguidance

    # Items in one parser row: llguidance's default (2,000) let a schema whose
    # anyOf has 2,900 object branches build, then fail mid-answer at its
    # first "{"; the largest such schema max_grammar_size lets build (~8,500
    # branches) fits under this, at ~10 ms a mask.
    return llguidance.LLParserLimits(step_lexer_fuel=70_000, step_max_items=50_000,
                                     max_items_in_row=100_000, max_grammar_size=500_000,
                                     verbose_errors=False)


class Constraints:
    """The model's llguidance tokenizer (built once, ~0.4 s, on first use)
    and a matcher per constrained request: built off the lanes, bounded and
    cached (grammar_build.py); a lane only copies the built one."""

    def __init__(self, hf_tokenizer, stop_token_ids: set[int], vocab_size: int,
                 nice: int = 0):
        self._hf = hf_tokenizer
        self._stops = sorted(stop_token_ids)
        self.vocab_size = vocab_size
        self._tokenizer = None
        self._lock = threading.Lock()
        self._builder = GrammarBuilder(self._build, nice)
        # llguidance's tokenizer holds the GIL while it is made (~0.2-0.3 s on
        # a 49k vocabulary): made now, while the lanes warm up, not when the
        # first grammar arrives and the lanes are streaming.
        self._builder.run_first(self._llg_tokenizer)

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

    def prepare(self, grammar: Grammar, timeout_s: float = BUILD_TIMEOUT_S):
        """The built matcher for `grammar` (a template: `matcher` copies it),
        from the cache or built now on the builder's thread; EngineError
        naming what is wrong with the grammar. All of its work, the
        schema's checks too, runs on the builder's one thread: many callers
        checking big schemas at once would each hold the GIL a while, and a
        lane waits behind all of them for its next Python step."""
        return self._builder.get(grammar.kind, grammar.text, timeout_s)

    def check(self, grammar: Grammar) -> None:
        """Raise EngineError naming what is wrong with `grammar`."""
        self.prepare(grammar)

    def matcher(self, grammar: Grammar):
        """A fresh matcher for one request."""
        return self.prepare(grammar).deep_copy()

    def close(self) -> None:
        self._builder.close()

    def _build(self, kind: str, text: str):
        """On the builder's thread: the grammar, its matcher, and a first mask
        (a grammar that allows nothing at its start is refused here)."""
        import llguidance

        from llguidance.numpy import fill_next_token_bitmask

        name = GRAMMAR_NAMES[kind]
        if kind == "json_schema":
            try:
                schema = json.loads(text)
            except (ValueError, RecursionError) as e:
                raise EngineError(f"The JSON schema is not valid JSON: {e}",
                                  "bad-argument") from None
            try:  # before llguidance sees it: its compile recurses per level
                check_bounds(schema)
            except SchemaError as e:
                raise EngineError(str(e), "bad-argument") from None
        try:
            source = grammar_text(Grammar(kind, text))
        except Exception as e:
            raise EngineError(f"The {name} is not valid: {e}", "bad-argument") from None
        matcher = llguidance.LLMatcher(self._llg_tokenizer(), source, log_level=0,
                                       limits=_limits())
        if matcher.is_error():
            raise EngineError(f"The {name} is not valid: {_first_line(matcher.get_error())}",
                              "bad-argument")
        if kind == "json_schema":
            try:
                check_satisfiable(schema)
            except SchemaError as e:
                raise EngineError(str(e), "bad-argument") from None
        probe = matcher.deep_copy()
        bits = np.zeros((1, (self.vocab_size + 31) // 32), dtype=np.int32)
        fill_next_token_bitmask(probe, bits, 0)
        if probe.is_error() or not bits.any():
            raise EngineError(f"The {name} cannot be satisfied: nothing may be written at its "
                              f"start ({_first_line(probe.get_error())}).", "bad-argument")
        return matcher


def _first_line(message: str) -> str:
    """llguidance's error without the parser state it appends."""
    return (message or "no reason given").strip().split("\n", 1)[0][:300]


def consume(matcher, token: int) -> None:
    """The matcher reads the token its row is fed (sampled under its mask)."""
    if not matcher.is_stopped() and not matcher.is_error():
        matcher.consume_token(token)


def draft_cut(matcher, fed: int, proposal: list[int]) -> list[int]:
    """A constrained row's drafts, before its verifying forward: the matcher
    reads `fed` (the token its row is fed now) and the proposal is cut to
    its longest prefix the grammar allows."""
    consume(matcher, fed)
    if matcher.is_stopped() or matcher.is_error() or not proposal:
        return []
    return proposal[:matcher.validate_tokens(proposal)]


def draft_masks(matcher, proposal: list[int], vocab: int,
                on_dead: Callable[[str], None]) -> np.ndarray:
    """One packed mask per position of a constrained row's verifying step
    (after its fed token, after each proposed token), reading the proposal
    as it goes: the caller rolls the rejected ones back
    (`matcher.rollback`) once it knows how many were accepted."""
    from llguidance.numpy import fill_next_token_bitmask

    bits = np.full((len(proposal) + 1, (vocab + 31) // 32), _ALLOW_ALL, dtype=np.int32)
    for j in range(len(proposal) + 1):
        if not matcher.is_error():
            fill_next_token_bitmask(matcher, bits, j)
        if matcher.is_error() or not bits[j].any():
            bits[j] = _ALLOW_ALL  # never sample from -inf alone
            on_dead("The answer's grammar reached a point it cannot continue from ("
                    f"{(matcher.get_error() or 'nothing is allowed next').strip()[:200]}"
                    "); the answer is cut there.")
        if j < len(proposal):
            matcher.consume_token(proposal[j])
    return bits


def unpack(bits: np.ndarray, vocab: int) -> mx.array:
    """Packed mask words (rows, V/32) as (rows, V) booleans, unpacked on the
    device: bit k of word w is token 32 w + k."""
    words_mx = mx.array(bits.view(np.uint32))
    shifts = mx.arange(32, dtype=mx.uint32)
    unpacked = (words_mx[:, :, None] >> shifts) & 1
    return unpacked.reshape(bits.shape[0], bits.shape[1] * 32)[:, :vocab].astype(mx.bool_)


def row_masks(matchers: list, vocab: int,
              on_dead: Callable[[int, str], None] | None = None) -> mx.array:
    """(B, V) booleans: the tokens each row may take next; every token for a
    row without a matcher; only a stop token once a row's grammar is
    complete. A row whose grammar cannot go on (its matcher in error, or
    nothing allowed) is reported to `on_dead(row, why)`: its request ends
    with an error before the token sampled now is shown, never with text
    the grammar did not allow (its row samples freely, to be thrown away)."""
    from llguidance.numpy import fill_next_token_bitmask

    words = (vocab + 31) // 32
    bits = np.full((len(matchers), words), _ALLOW_ALL, dtype=np.int32)
    for i, matcher in enumerate(matchers):
        if matcher is None:
            continue
        if not matcher.is_error():
            # A finished grammar allows only the stop tokens (llguidance's mask).
            fill_next_token_bitmask(matcher, bits, i)
        if matcher.is_error() or not bits[i].any():
            bits[i] = _ALLOW_ALL  # never sample from -inf alone
            if on_dead is not None:
                on_dead(i, "The answer's grammar reached a point it cannot continue from ("
                           f"{(matcher.get_error() or 'nothing is allowed next').strip()[:200]}"
                           "); the answer is cut there.")
    # The packed words go to the device (V/8 bytes a row, not V).
    return unpack(bits, vocab)
