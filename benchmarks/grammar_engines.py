"""llguidance vs outlines-core for Tandem's structured output: time to build
a schema's grammar, time per token mask, and which schemas each accepts.

Run: .venv/bin/python benchmarks/grammar_engines.py [--model default]

Each engine gets the same model tokenizer and schemas; per-token time walks a
valid JSON instance token by token (mask, then consume), as decoding does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SCHEMAS = {
    "object": ({"type": "object"}, {"a": 1, "b": [True, None, "x"]}),
    "person": ({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
        "required": ["name", "age"], "additionalProperties": False},
        {"name": "Ada", "age": 36, "tags": ["math"]}),
    "defs": ({"type": "object", "$defs": {"pt": {"type": "object", "properties": {
        "x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"],
        "additionalProperties": False}},
        "properties": {"path": {"type": "array", "items": {"$ref": "#/$defs/pt"},
                                "minItems": 1},
                       "kind": {"enum": ["line", "curve"]}},
        "required": ["path", "kind"], "additionalProperties": False},
        {"path": [{"x": 1.5, "y": -2}], "kind": "line"}),
}


def _hf(model: str):
    from engine.models.loader import load_model

    loaded = load_model(model)
    return loaded.tokenizer._tokenizer, loaded


def bench_llguidance(hf, eos, schema, instance):
    import llguidance
    import llguidance.hf
    import numpy as np
    from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

    t0 = time.perf_counter()
    tok = llguidance.hf.from_tokenizer(hf, eos_token=eos)
    t_tok = time.perf_counter() - t0
    t0 = time.perf_counter()
    grammar = llguidance.grammar_from("json_schema", json.dumps(schema))
    matcher = llguidance.LLMatcher(tok, grammar)
    t_compile = time.perf_counter() - t0
    if matcher.is_error():
        return t_tok, t_compile, None, matcher.get_error()
    mask = allocate_token_bitmask(1, tok.vocab_size)
    times = []
    for t in hf.encode(json.dumps(instance), add_special_tokens=False):
        t0 = time.perf_counter()
        fill_next_token_bitmask(matcher, mask)
        times.append(time.perf_counter() - t0)
        assert (mask[0, t // 32] >> (t % 32)) & 1, "a valid token was masked"
        matcher.consume_token(t)
    return t_tok, t_compile, statistics.median(times), None


def bench_outlines(hf, eos, schema, instance, model_name):
    from outlines_core import Guide, Index, Vocabulary
    from outlines_core.json_schema import build_regex_from_schema

    t0 = time.perf_counter()
    vocab = Vocabulary.from_pretrained(model_name) if False else _vocab(hf, eos)
    t_tok = time.perf_counter() - t0
    t0 = time.perf_counter()
    try:
        regex = build_regex_from_schema(json.dumps(schema))
        index = Index(regex, vocab)
    except Exception as e:  # noqa: BLE001
        return t_tok, time.perf_counter() - t0, None, f"{type(e).__name__}: {e}"[:120]
    guide = Guide(index)
    t_compile = time.perf_counter() - t0
    times = []
    for t in hf.encode(json.dumps(instance, separators=(",", ":")), add_special_tokens=False):
        t0 = time.perf_counter()
        allowed = guide.get_tokens()
        times.append(time.perf_counter() - t0)
        if t not in allowed:
            return t_tok, t_compile, statistics.median(times), "a valid token was masked"
        guide.advance(t)
    return t_tok, t_compile, statistics.median(times), None


def _vocab(hf, eos):
    from outlines_core import Vocabulary

    vocab: dict[str, list[int]] = {}
    for piece, i in hf.get_vocab().items():
        if i == eos:
            continue
        text = hf.convert_tokens_to_string([piece])
        vocab.setdefault(text, []).append(i)
    return Vocabulary(eos, vocab)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="default")
    args = parser.parse_args()
    hf, loaded = _hf(args.model)
    eos = sorted(loaded.stop_token_ids)[0]
    print(f"# model {args.model}, vocabulary {len(hf)}")
    print("| engine | schema | tokenizer setup s | grammar build s | mask per token ms | note |")
    print("|---|---|---|---|---|---|")
    for name, (schema, instance) in SCHEMAS.items():
        for engine in ("llguidance", "outlines-core"):
            try:
                if engine == "llguidance":
                    r = bench_llguidance(hf, eos, schema, instance)
                else:
                    r = bench_outlines(hf, eos, schema, instance, args.model)
            except Exception as e:  # noqa: BLE001
                r = (float("nan"), float("nan"), None, f"{type(e).__name__}: {e}"[:120])
            t_tok, t_compile, per, note = r
            per_s = f"{per * 1000:.3f}" if per is not None else "-"
            print(f"| {engine} | {name} | {t_tok:.2f} | {t_compile:.3f} | {per_s} | "
                  f"{note or 'ok'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
