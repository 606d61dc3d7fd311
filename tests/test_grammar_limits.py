"""Hostile grammars (issue 30): a schema that crashed llguidance's compile
(a `$ref` chain 1,000 long: SIGSEGV), one that stalls the lanes (a 400 KB
`anyOf`), one no finite JSON matches, and a grammar that dies mid-answer.
Each is refused with a message naming the problem, built off the lanes, or
ends its request with an error; never the process, never unconstrained text.

The crash cases run in a subprocess so that the suite survives a regression."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from engine import EngineError, Grammar, SamplingParams
from engine.core.params import MAX_GRAMMAR_CHARS
from engine.core.request import Request
from engine.core.schema_check import MAX_DEPTH, SchemaError, check_bounds, check_satisfiable

ROOT = Path(__file__).resolve().parent.parent


def chain(n: int) -> dict:
    """`$defs` d0 -> d1 -> ... -> dn, each an object whose one property is the next:
    flat JSON (nesting 4), 75 KB at n = 1,000."""
    defs = {f"d{i}": {"type": "object", "properties": {"n": {"$ref": f"#/$defs/d{i + 1}"}}}
            for i in range(n)}
    defs[f"d{n}"] = {"type": "integer"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def wide_any_of(n: int) -> dict:
    return {"anyOf": [{"type": "object", "properties": {
        f"k{i}_{j}": {"type": "string", "pattern": f"^v{i}[a-z]{{{j % 5 + 1}}}$"}
        for j in range(3)}, "required": [f"k{i}_0"], "additionalProperties": False}
        for i in range(n)]}


UNSATISFIABLE = {
    "itself, required": {"type": "object", "properties": {"a": {"$ref": "#"}},
                         "required": ["a"]},
    "a def that is only itself": {"$defs": {"a": {"$ref": "#/$defs/a"}},
                                  "$ref": "#/$defs/a"},
    "a non-empty array of itself": {"type": "array", "items": {"$ref": "#"}, "minItems": 1},
    "two defs that need each other": {
        "$defs": {"a": {"type": "object", "properties": {"b": {"$ref": "#/$defs/b"}},
                        "required": ["b"]},
                  "b": {"type": "array", "items": {"$ref": "#/$defs/a"}, "minItems": 2}},
        "$ref": "#/$defs/a"},
}
SATISFIABLE = {
    "optional self": {"type": "object", "properties": {"a": {"$ref": "#"}}},
    "untyped required self (a number matches)": {"properties": {"a": {"$ref": "#"}},
                                                 "required": ["a"]},
    "a way out in anyOf": {"anyOf": [{"type": "object", "properties": {"a": {"$ref": "#"}},
                                      "required": ["a"]}, {"type": "null"}]},
    "a tree": {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["v", "kids"]}}, "$ref": "#/$defs/node"},
    "object or null, required self": {"type": ["object", "null"],
                                      "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
}


def _run_child(code: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


CHILD_SETUP = """
    import faulthandler, json, sys
    faulthandler.enable()
    sys.path.insert(0, ".")
    import engine
    from pathlib import Path
    import tempfile
    from tests.tiny_model import build_tokenizer
    from tests.test_grammar_limits import chain
    from engine import EngineError, Grammar
    from engine.runtime.constrain import Constraints
    hf = build_tokenizer(Path(tempfile.mkdtemp()))
    constraints = Constraints(hf, {hf.eos_token_id}, len(hf))
"""


def test_a_ref_chain_1000_long_is_refused_and_the_process_lives():
    """Case 1: 74 KB of flat JSON whose $refs chain 1,000 deep crashed
    llguidance (SIGSEGV, rc 139) on any 8 MiB stack."""
    schema = json.dumps(chain(1000))
    assert 70_000 < len(schema) < MAX_GRAMMAR_CHARS
    child = _run_child(CHILD_SETUP + """
    try:
        constraints.prepare(Grammar("json_schema", json.dumps(chain(1000))))
        print("BUILT")
    except EngineError as e:
        print("REFUSED", e)
    """)
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])
    assert "REFUSED" in child.stdout and f"more than {MAX_DEPTH} levels" in child.stdout


def test_the_builder_thread_has_the_stack_for_what_the_bounds_let_through():
    """The second guard: with the depth bound lifted, the builder's 64 MiB
    stack still builds a chain of 2,000 (8 MiB crashed at ~1,000)."""
    child = _run_child(CHILD_SETUP + """
    import engine.core.schema_check as sc
    sc.MAX_DEPTH, sc.MAX_SUBSCHEMAS = 10**6, 10**7
    matcher = constraints.prepare(Grammar("json_schema", json.dumps(chain(2000))))
    print("BUILT", matcher.is_error())
    """)
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])
    assert "BUILT False" in child.stdout


def test_depth_and_size_are_bounded_before_llguidance_sees_them():
    check_bounds(chain(MAX_DEPTH // 2 - 2))  # each link is two levels: d_i, its property
    with pytest.raises(SchemaError, match="levels deep"):
        check_bounds(chain(MAX_DEPTH))
    deep = {"type": "integer"}
    for _ in range(200):  # plain nesting, no refs (the server bounds JSON nesting too)
        deep = {"type": "array", "items": deep}
    with pytest.raises(SchemaError, match="levels deep"):
        check_bounds(deep)
    many = {"anyOf": [{"type": "string", "maxLength": i} for i in range(25_000)]}
    with pytest.raises(SchemaError, match="subschemas"):
        check_bounds(many)


@pytest.mark.parametrize("name", sorted(UNSATISFIABLE))
def test_a_schema_no_finite_json_matches_is_refused_by_name(name):
    with pytest.raises(SchemaError, match="cannot be satisfied") as info:
        check_satisfiable(UNSATISFIABLE[name])
    assert "#" in str(info.value)  # it says where


@pytest.mark.parametrize("name", sorted(SATISFIABLE))
def test_recursive_schemas_with_a_way_out_are_kept(name):
    check_bounds(SATISFIABLE[name])
    check_satisfiable(SATISFIABLE[name])


@pytest.fixture
def constraints(tiny_loaded):
    from engine.runtime.constrain import Constraints

    c = Constraints(tiny_loaded.tokenizer._tokenizer, set(tiny_loaded.stop_token_ids),
                    tiny_loaded.model.args.vocab_size)
    yield c
    c.close()


def test_unsatisfiable_schemas_are_a_clear_error_at_submit(make_engine):
    """Case 3: these answered 200 with text that was not JSON."""
    engine = make_engine()
    for name, schema in UNSATISFIABLE.items():
        with pytest.raises(EngineError, match="cannot be satisfied") as info:
            engine.submit([{"role": "user", "content": "hi"}], SamplingParams(
                max_tokens=40, grammar=Grammar("json_schema", json.dumps(schema))))
        assert info.value.kind == "bad-argument", name
    # What llguidance detects itself keeps its own, sharper message.
    with pytest.raises(EngineError, match="minimum"):
        engine.prepare_grammar(Grammar("json_schema", '{"type": "integer", "minimum": 5, '
                                                      '"maximum": 1}'))
    done = engine.submit([{"role": "user", "content": "hi"}], SamplingParams(
        max_tokens=40, grammar=Grammar("json_schema", json.dumps(
            SATISFIABLE["a way out in anyOf"])))).result(60)
    assert done.reason in ("stop", "length") and done.error is None


def test_grammars_build_on_the_builder_thread_once_and_are_copied(constraints):
    built_on = []
    real = constraints._build

    def spy(kind, text):
        built_on.append(threading.current_thread().name)
        return real(kind, text)

    constraints._builder._build = spy
    grammar = Grammar("json_schema", json.dumps(SATISFIABLE["a tree"]))
    first = constraints.prepare(grammar)
    assert constraints.prepare(Grammar("json_schema", grammar.text)) is first  # cached
    assert built_on == ["grammar-builder"]
    one, two = constraints.matcher(grammar), constraints.matcher(grammar)
    assert one is not two and one is not first
    brace = constraints._hf.encode("{", add_special_tokens=False)[0]
    assert one.consume_token(brace)
    assert one.try_consume_tokens([brace]) == 0  # '{' is no longer allowed in one ...
    assert two.try_consume_tokens([brace]) == 1  # ... and two still stands at the start
    # A bad grammar is remembered too: refused again without a build.
    for _ in range(2):
        with pytest.raises(EngineError, match="cannot be satisfied"):
            constraints.prepare(Grammar("json_schema", json.dumps(
                UNSATISFIABLE["itself, required"])))
    assert built_on == ["grammar-builder"] * 2


def test_a_grammar_too_slow_to_build_is_refused_then_served_from_the_cache(constraints):
    """Case 2's schema (240 KB of anyOf, ~0.3 s to build): a caller waits
    at most its time limit; the build goes on and the same schema, sent
    again, gets the built grammar."""
    grammar = Grammar("json_schema", json.dumps(wide_any_of(900)))
    with pytest.raises(EngineError, match="took more than"):
        constraints.prepare(grammar, timeout_s=0.001)
    matcher = constraints.prepare(grammar, timeout_s=120)
    assert not matcher.is_error()
    assert constraints.prepare(grammar, timeout_s=0.001) is matcher


def test_a_row_whose_grammar_dies_ends_with_an_error_and_shows_nothing_more(tiny_loaded):
    """A matcher that can no longer go on (here: fed a token it does not
    allow, as a resource limit would leave it) used to let its row sample
    every token; now its request ends with an error at the next commit, and
    the token sampled past that point is never shown."""
    from engine.core.director import Director
    from engine.core.events import Finished
    from engine.core.laneconfig import LaneConfig
    from engine.core.scheduler import LaneScheduler
    from engine.core.step import StepPlan, StepResult
    from engine.runtime.constrain import Constraints, row_masks

    c = Constraints(tiny_loaded.tokenizer._tokenizer, set(tiny_loaded.stop_token_ids),
                    tiny_loaded.model.args.vocab_size)
    try:
        matcher = c.matcher(Grammar("regex", "ab+"))
    finally:
        c.close()
    request = Request([1, 2, 3], SamplingParams(max_tokens=8))
    bad = tiny_loaded.tokenizer.encode("zz", add_special_tokens=False)[0]
    matcher.consume_token(bad)
    assert matcher.is_error()
    dead = []
    row_masks([None, matcher], tiny_loaded.model.args.vocab_size,
              lambda i, why: dead.append((i, why)))
    assert [i for i, _ in dead] == [1] and "cannot continue" in dead[0][1]
    request.failure = dead[0][1]

    events = []
    director = Director(policy=None, stop_token_ids=set(tiny_loaded.stop_token_ids),
                        context_length=512, emit=events.append)
    scheduler = LaneScheduler("cpu", "cpu", director, None, LaneConfig())
    scheduler.running.append(request)
    outcome = scheduler.commit(StepPlan(decode=[request]), StepResult([5], 0.01))
    assert outcome.tokens == [] and outcome.finished == [(request, "error")]
    from engine.core.settle import settle

    settle(scheduler, StepPlan(decode=[request]), outcome, lambda r, t: False, lambda r: None)
    finished = [e for e in events if isinstance(e, Finished)]
    assert len(finished) == 1 and finished[0].reason == "error"
    assert "cannot continue" in finished[0].error


def test_the_app_refuses_a_hostile_schema_in_the_tab_and_builds_off_the_gui_thread(
        qtbot, window):
    """In the app the chat's schema took the same path: one paste ended the
    app. Now the tab says why, and the next answer works; grammars are
    prepared on the tokenising thread, so submit on the GUI thread finds
    them built."""
    tab = window.chat_tabs()[0] if window.chat_tabs() else window.new_chat()
    engine = window.engine
    from engine.runtime.grammar_build import grammar_key

    prepared_on = []  # (thread, already built?)
    real = engine.prepare_grammar
    cache = engine.constraints._builder._cache

    def spy(grammar):
        built = grammar_key(grammar.kind, grammar.text) in cache
        prepared_on.append((threading.current_thread().name, built))
        return real(grammar)

    engine.prepare_grammar = spy
    settings = tab.settings_row
    settings.format.setCurrentIndex(settings.format.findData("json_schema"))
    settings.schema.setPlainText(json.dumps(chain(1000)))
    tab.composer.setPlainText("a number please")
    tab.send()
    qtbot.waitUntil(lambda: "levels deep" in tab.footer.text(), timeout=30_000)
    settings.schema.setPlainText(json.dumps(SATISFIABLE["a tree"]))
    with qtbot.waitSignal(window.bridge.finished, timeout=60_000) as finished:
        tab.composer.setPlainText("a tree please")
        tab.send()
    assert finished.args[0].reason in ("stop", "length")
    # Built on the tokenising thread; the GUI thread's submit found it built.
    gui = threading.main_thread().name
    assert ("tokenise", False) in prepared_on and (gui, False) not in prepared_on
    assert (gui, True) in prepared_on


def test_the_cache_of_built_grammars_is_bounded_by_their_size():
    """A built matcher takes ~40x its text in memory: the cache keeps at most
    CACHE_TEXT_BYTES of grammar text (and CACHE_ENTRIES grammars), oldest
    out first; a grammar still wanted stays."""
    from engine.runtime import grammar_build as gb

    builds = []
    builder = gb.GrammarBuilder(lambda kind, text: builds.append(text) or object())
    try:
        big = gb.CACHE_TEXT_BYTES // 4
        texts = [str(i) * big for i in range(1, 8)]
        first = builder.get("regex", texts[0])
        for text in texts[1:]:
            builder.get("regex", text)
            assert builder._cached_bytes <= gb.CACHE_TEXT_BYTES
        assert builder.get("regex", texts[-1]) is not None and len(builds) == len(texts)
        assert builder.get("regex", texts[0]) is not first  # evicted: built again
        assert len(builds) == len(texts) + 1
        for i in range(gb.CACHE_ENTRIES + 5):
            builder.get("regex", f"x{i}")
        assert len(builder._cache) <= gb.CACHE_ENTRIES
    finally:
        builder.close()
