"""Constrained decoding (issue 23): a request with a `Grammar` gets a mask on
its row of every step, so a tiny random model, sampling, answers with
schema-valid JSON whenever it finishes with "stop" (max_tokens cuts say
"length"); free requests in the same batch are untouched (their greedy
answers equal a reference run)."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from engine import EngineError, Grammar, LaneSpec, SamplingParams
from tests.helpers import prompt_of, reference_greedy
from tests.test_two_lanes import PingPong, _two_lanes

SCHEMAS = [
    {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {
        "kind": {"enum": ["cat", "dog", "fox"]},
        "score": {"type": "number", "minimum": -1, "maximum": 1},
        "ok": {"type": "boolean"}},
     "required": ["kind", "score", "ok"], "additionalProperties": False},
    {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5},
                 "minItems": 1, "maxItems": 3}},
     "required": ["tags"], "additionalProperties": False},
    {"type": "object", "$defs": {"pt": {
        "type": "object", "properties": {"x": {"type": "integer", "minimum": 0,
                                               "maximum": 9},
                                         "y": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["x", "y"], "additionalProperties": False}},
     "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"$ref": "#/$defs/pt"},
                    "note": {"type": ["string", "null"], "maxLength": 6}},
     "required": ["a", "b", "note"], "additionalProperties": False},
    {"type": "object"},  # any JSON object (response_format json_object)
]


def _json_grammar(schema: dict) -> Grammar:
    return Grammar("json_schema", json.dumps(schema))


def test_sampled_answers_that_stop_are_always_schema_valid(make_engine, tiny_loaded):
    """256 sampled answers over five schemas, 16 at a time in one batch; at
    least 200 of them stop (the rest are cut by max_tokens: 80, past the
    longest answer that stops here, 67 tokens; each round lasts as long as
    its cut answers)."""
    engine = make_engine()
    stops = lengths = 0
    for round_ in range(16):
        handles = []
        for i in range(16):
            schema = SCHEMAS[(round_ * 16 + i) % len(SCHEMAS)]
            params = SamplingParams(max_tokens=80, temperature=1.0, top_p=0.95,
                                    seed=round_ * 100 + i, grammar=_json_grammar(schema))
            handles.append((schema, engine.submit(
                [{"role": "user", "content": f"answer {round_} {i}"}], params)))
        for schema, handle in handles:
            done = handle.result(120)
            if done.reason == "stop":
                stops += 1
                jsonschema.validate(json.loads(done.text), schema)
            else:
                assert done.reason == "length", done.error
                lengths += 1
    assert stops >= 200, (stops, lengths)


def test_constrained_and_free_requests_share_the_batch(make_engine, tiny_loaded):
    engine = make_engine()
    free = [prompt_of(tiny_loaded, t) for t in ("hello world", "the quick brown fox")]
    handles = [engine.submit(prompt_ids=ids, params=SamplingParams(max_tokens=30))
               for ids in free]
    constrained = [engine.submit(
        [{"role": "user", "content": "hi"}],
        SamplingParams(max_tokens=160, temperature=0.8, seed=s, grammar=_json_grammar(SCHEMAS[1])))
        for s in range(4)]
    for ids, handle in zip(free, handles):
        handle.result(60)
        assert handle.request.output_ids == reference_greedy(tiny_loaded, ids, 30)
    for handle in constrained:
        done = handle.result(60)
        assert done.reason == "stop"
        jsonschema.validate(json.loads(done.text), SCHEMAS[1])


def test_a_cut_answer_says_length_and_other_grammars(make_engine):
    engine = make_engine()
    cut = engine.generate([{"role": "user", "content": "hi"}], SamplingParams(
        max_tokens=3, grammar=_json_grammar(SCHEMAS[3])), timeout=60)
    assert cut.reason == "length"
    regex = engine.generate([{"role": "user", "content": "hi"}], SamplingParams(
        max_tokens=20, temperature=1.0, seed=1,
        grammar=Grammar("regex", r"[0-9]{3}-[a-z]{2}")), timeout=60)
    assert regex.reason == "stop" and re.fullmatch(r"[0-9]{3}-[a-z]{2}", regex.text)
    choice = engine.generate([{"role": "user", "content": "hi"}], SamplingParams(
        max_tokens=10, temperature=1.0, seed=2,
        grammar=Grammar("choice", json.dumps(["red", "green", "blue"]))), timeout=60)
    assert choice.reason == "stop" and choice.text in ("red", "green", "blue")


def test_a_constrained_request_moving_between_lanes_stays_valid(make_engine):
    engine = make_engine(_two_lanes(), policy=PingPong())
    for lane in engine.lanes.values():
        lane.reconsider_every = 1
    schema = {"type": "object", "properties": {"items": {
        "type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 999},
        "minItems": 30, "maxItems": 30}}, "required": ["items"],
        "additionalProperties": False}
    done = engine.generate([{"role": "user", "content": "hi"}], SamplingParams(
        max_tokens=200, temperature=1.0, seed=3, grammar=_json_grammar(schema)), timeout=60)
    assert done.reason == "stop", done.error
    assert done.lanes[:3] == (("prefill", "gpu"), ("decode", "cpu"), ("decode", "gpu"))
    jsonschema.validate(json.loads(done.text), schema)


@pytest.mark.parametrize("grammar,words", [
    (Grammar("json_schema", "{not json"), "not valid JSON"),
    (Grammar("json_schema", json.dumps({"type": "object", "properties": {
        "a": {"$ref": "#/$defs/missing"}}})), "not valid"),
    (Grammar("regex", "([a-z"), "not valid"),
])
def test_a_bad_grammar_is_refused_at_submit(make_engine, grammar, words):
    engine = make_engine([LaneSpec("cpu", "cpu", "float32")])
    with pytest.raises(EngineError) as e:
        engine.submit([{"role": "user", "content": "hi"}], SamplingParams(grammar=grammar))
    assert e.value.kind == "bad-argument" and words in str(e.value)
    with pytest.raises(EngineError):
        Grammar("yaml", "a: 1")
