"""Generated JSON schemas (unions, nesting, $ref chains, self references,
false, dangling refs) through the real grammar build path (issue 30), in a
child process under a memory limit: each is built or refused with an
EngineError, and a built one gives masks for a few tokens."""

from __future__ import annotations

import json

from engine import EngineError, Grammar
from tests.test_grammar_limits import CHILD_SETUP, _run_child


# ---- fuzzing the schema path ------------------------------------------------------------
# Generated schemas (unions, nesting, $ref chains, self references, false,
# dangling refs) through the real build path, with its time limit, in a
# child process under a memory limit: each is built or refused with an
# EngineError, and a built one gives masks for a few tokens.

def schema_strategy():
    from hypothesis import strategies as st

    leaf = st.sampled_from([
        {"type": "string"}, {"type": "integer", "minimum": 0, "maximum": 9}, {"type": "boolean"},
        {"type": "null"}, {"enum": ["a", "b"]}, {"type": "string", "maxLength": 3},
        {"type": "string", "pattern": "^(a|b)+$"}, {"type": "number"}, {"const": 1}, True, False,
        {"$ref": "#"}, {"$ref": "#/$defs/d0"}, {"$ref": "#/$defs/missing"}, {}])

    def extend(children):
        names = st.sampled_from(["a", "b", "c"])
        return st.one_of(
            st.builds(lambda props, req, extra: {"type": "object", "properties": props,
                                                 "required": req,
                                                 "additionalProperties": extra},
                      st.dictionaries(names, children, max_size=3), st.lists(names, max_size=2),
                      st.booleans()),
            st.builds(lambda items, least: {"type": "array", "items": items, "minItems": least},
                      children, st.integers(0, 2)),
            st.lists(children, max_size=4).map(lambda xs: {"anyOf": xs}),
            st.lists(children, min_size=1, max_size=3).map(lambda xs: {"oneOf": xs}),
            st.lists(children, min_size=1, max_size=3).map(lambda xs: {"allOf": xs}),
            st.builds(lambda c: {"type": ["object", "null"], "properties": {"a": c},
                                 "required": ["a"]}, children))

    body = st.recursive(leaf, extend, max_leaves=25)

    def with_chain(root, links, end):
        defs = {f"d{i}": {"type": "object", "properties": {"n": {"$ref": f"#/$defs/d{i + 1}"}}}
                for i in range(links)}
        defs[f"d{links}"] = end
        root = root if isinstance(root, dict) else {"allOf": [root]}
        return {**root, "$defs": defs}

    return st.builds(with_chain, body, st.integers(0, 300), body)


def fuzz_schema_builds(constraints, examples: int) -> int:
    """Run the fuzz; returns how many schemas were built (the rest refused)."""
    import numpy as np
    from hypothesis import HealthCheck, given, settings
    from llguidance.numpy import fill_next_token_bitmask

    built = []

    @settings(max_examples=examples, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(schema=schema_strategy())
    def one(schema):
        try:
            matcher = constraints.prepare(Grammar("json_schema", json.dumps(schema)),
                                          timeout_s=30).deep_copy()
        except EngineError as e:
            assert e.kind in ("bad-argument",), e
            return
        built.append(1)
        bits = np.zeros((1, (constraints.vocab_size + 31) // 32), dtype=np.int32)
        for _ in range(12):
            if matcher.is_stopped() or matcher.is_error():
                break
            fill_next_token_bitmask(matcher, bits, 0)
            allowed = np.flatnonzero(np.unpackbits(bits.view(np.uint8), bitorder="little"))
            assert allowed.size, schema
            matcher.consume_token(int(allowed[len(allowed) // 2]))
        assert not matcher.is_error(), matcher.get_error()

    one()
    return len(built)


def test_generated_schemas_are_built_or_refused_within_time_and_memory():
    child = _run_child(CHILD_SETUP + """
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (12 << 30, 12 << 30))
    from tests.test_grammar_fuzz import fuzz_schema_builds
    print("BUILT", fuzz_schema_builds(constraints, 200))
    """, timeout=280)
    assert child.returncode == 0, (child.returncode, child.stdout[-1500:], child.stderr[-3000:])
    built = int(child.stdout.split("BUILT")[-1])
    assert 20 <= built <= 190, child.stdout  # both outcomes were reached
