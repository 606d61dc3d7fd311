"""One declared engine interface (engine/interface.py): `Engine` and
`RemoteModelEngine` both satisfy `EngineAPI`, member by member; what an
engine can do is data (`capabilities`); one way in (`prepare`, then
`submit`); a request's handle read by a thread or awaited by an event loop."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import inspect
import threading
from pathlib import Path

import pytest

from engine import (Capabilities, Engine, EngineAPI, EngineError, Finished, Grammar,
                    LaneSpec, Prepared, SamplingParams, Token)
from engine.core.remote import RemoteSpec
from engine.core.router import MODES
from engine.remote_model import RemoteModelEngine
from tests.helpers import prompt_of
from tests.test_remote_lanes import SCRIPT, remote_server, scripted_dir  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
HI = [{"role": "user", "content": "hello world, how are you today?"}]


# ---- the interface, member by member ---------------------------------------------------
def _members(protocol) -> dict[str, object]:
    """The protocol's own methods and properties (its data fields apart)."""
    return {name: value for name, value in vars(protocol).items()
            if (callable(value) or isinstance(value, property))
            and (not name.startswith("_") or name in ("__enter__", "__exit__"))}


def _shape(function) -> list[tuple]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


_MISSING = object()


def drift(protocol, cls) -> list[str]:
    """Where `cls` differs from `protocol`: a member missing, a property that
    is not one, a method whose parameters (names, kinds, defaults) differ."""
    out = []
    for name, member in _members(protocol).items():
        mine = inspect.getattr_static(cls, name, _MISSING)
        if mine is _MISSING:
            out.append(f"{cls.__name__}.{name} is missing")
        elif isinstance(member, property) != isinstance(mine, property):
            out.append(f"{cls.__name__}.{name}: property is {isinstance(mine, property)}, "
                       f"the interface says {isinstance(member, property)}")
        elif not isinstance(member, property) and _shape(member) != _shape(mine):
            out.append(f"{cls.__name__}.{name}{inspect.signature(mine)} is not "
                       f"{name}{inspect.signature(member)}")
    return out


@pytest.mark.parametrize("cls", [Engine, RemoteModelEngine])
def test_both_engines_have_every_member_of_the_interface(cls):
    assert drift(EngineAPI, cls) == []


def test_the_comparison_sees_drift():
    class Drifted:
        capabilities = None  # not a property

        def submit(self, messages, params=None, tab_id=None):  # tab_id not keyword-only
            ...

        def prepare(self, messages, *, continue_from=None, tools=None, grammar=None,
                    tool_choice=None):
            ...

    found = " ".join(drift(EngineAPI, Drifted))
    assert "capabilities: property is False" in found
    assert "Drifted.submit(" in found and "Drifted.prepare(" not in found
    assert "Drifted.count_tokens is missing" in found


def test_capabilities_are_frozen_data_with_exactly_these_fields():
    fields = [(f.name, f.type, f.default) for f in dataclasses.fields(Capabilities)]
    missing = dataclasses.MISSING
    assert fields == [
        ("modes", "tuple[str, ...]", missing), ("remote_lanes", "bool", missing),
        ("renders_locally", "bool", missing), ("logprobs", "bool", missing),
        ("grammars", "bool", missing), ("tools", "bool", missing),
        ("drafts", "bool", False), ("images", "bool", False), ("embeddings", "bool", False),
        ("saved_kv", "bool", False), ("chat", "bool", True)]
    caps = Capabilities(("cpu-only",), True, True, True, True, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        caps.tools = True


def _accepted(engine) -> tuple[str, ...]:
    """The modes `set_mode` accepts, found by trying each one."""
    accepted, start = [], engine.mode
    for mode in MODES:
        try:
            engine.set_mode(mode)
        except EngineError:
            continue
        accepted.append(mode)
    if start in accepted:
        engine.set_mode(start)
    return tuple(accepted)


def test_a_local_engine_says_what_it_can_do(make_engine):
    one = make_engine()
    assert isinstance(one, EngineAPI)
    caps = one.capabilities
    assert caps == Capabilities(modes=("cpu-only",), remote_lanes=True, renders_locally=True,
                                logprobs=True, grammars=True, tools=one.tool_format is not None)
    assert _accepted(one) == caps.modes
    two = make_engine([LaneSpec("gpu", "cpu", "float32", acts_as="gpu"),
                       LaneSpec("cpu", "cpu", "float32")])
    assert two.capabilities.modes == ("gpu-only", "hybrid", "cpu-only") == _accepted(two)


def test_a_remote_model_says_what_it_cannot_do():
    """Built against a port nobody listens on: its members are there at once
    (its probe fails on its own thread)."""
    engine = RemoteModelEngine(RemoteSpec("http://127.0.0.1:9/v1", model="m"))
    try:
        assert isinstance(engine, EngineAPI)
        assert engine.capabilities == Capabilities(
            modes=("hybrid",), remote_lanes=False, renders_locally=False, logprobs=False,
            grammars=False, tools=False)
        assert _accepted(engine) == engine.capabilities.modes
        assert engine.count_tokens("") == 0
        assert engine.count_tokens("abcdef") == 2 and engine.count_tokens("abcdefg") == 3
        assert engine.count_tokens("日本語") == 3  # a token a character or more, not a third
        prepared = engine.prepare(HI, continue_from="I am")
        assert prepared.prompt_ids is None and prepared.grammar is None
        assert prepared.messages == HI + [{"role": "assistant", "content": "I am"}]
        for bad in (lambda: engine.prepare(HI, tools=[{"type": "function"}]),
                    lambda: engine.prepare(HI, grammar=Grammar("regex", "a+")),
                    lambda: engine.prepare([]), lambda: engine.prepare_prompt([1, 2]),
                    lambda: engine.submit(Prepared(None, [1, 2]))):
            with pytest.raises(EngineError):
                bad()
    finally:
        engine.close()


# ---- one way in: prepare, then submit ----------------------------------------------------
def test_prepare_then_submit_is_what_the_shorthands_do(make_engine, tiny_loaded):
    engine = make_engine()
    prepared = []  # made on another thread, as the app's tokenising thread does
    worker = threading.Thread(target=lambda: prepared.append(engine.prepare(HI)))
    worker.start()
    worker.join(60)
    (ready,) = prepared
    assert ready.messages == HI and ready.prompt_ids == engine.render(HI)
    assert ready.grammar is None and ready.continue_from is None
    params = SamplingParams(max_tokens=12)
    answers = [engine.submit(ready, params, tab_id="t").result(60),
               engine.submit(HI, params).result(60),
               engine.submit(prompt_ids=prompt_of(tiny_loaded, HI[0]["content"]),
                             params=params).result(60),
               engine.generate(ready, params, timeout=60)]
    assert len({a.text for a in answers}) == 1 and answers[0].output_tokens > 0
    assert engine.count_tokens("the quick brown fox") == len(
        engine.tokenizer.encode("the quick brown fox", add_special_tokens=False))
    raw = engine.prepare_prompt("the quick brown fox")
    assert raw.messages is None and raw.prompt_ids == list(
        engine.tokenizer.encode("the quick brown fox"))


def test_an_interrupted_answer_goes_on_from_its_text(make_engine):
    engine = make_engine()
    first = engine.generate(HI, SamplingParams(max_tokens=16), timeout=60)
    cut = first.text[:len(first.text) // 2]
    assert cut
    resumed = engine.prepare(HI, continue_from=cut)
    assert resumed.continue_from == cut
    assert resumed.prompt_ids == engine.render(HI) + list(
        engine.tokenizer.encode(cut, add_special_tokens=False))
    rest = engine.submit(resumed, SamplingParams(max_tokens=16)).result(60)
    assert rest.prompt_tokens == len(resumed.prompt_ids)


def test_a_prepared_grammar_holds_the_answer(make_engine):
    engine = make_engine()
    choices = Grammar("choice", '["yes", "no"]')
    prepared = engine.prepare(HI, grammar=choices)
    assert prepared.grammar == choices
    # Held without repeating it in the params; the same one there is fine too.
    for params in (SamplingParams(max_tokens=8), SamplingParams(max_tokens=8, grammar=choices)):
        assert engine.submit(prepared, params).result(60).text in ("yes", "no")
    with pytest.raises(EngineError, match="another grammar"):
        engine.submit(prepared, SamplingParams(grammar=Grammar("regex", "[0-9]+")))
    with pytest.raises(EngineError, match="prepare"):
        engine.submit(Prepared(HI, None))  # a remote model's: nothing rendered
    with pytest.raises(EngineError, match="prepare"):
        engine.submit(prepared, tools=[{"type": "function"}])
    with pytest.raises(EngineError, match="vocabulary"):
        engine.submit(Prepared(None, [0, 10**9]))


def test_a_bug_while_finishing_still_ends_the_request(make_engine, monkeypatch):
    """Reading the answer's text at its end raises (a stream missing a field
    the director reads: how a remote model's requests once hung): the request
    still ends, with one Finished saying so, and the engine goes on."""
    from engine.runtime.textstream import TextStream

    engine = make_engine()
    with monkeypatch.context() as patch:
        patch.setattr(TextStream, "finish", lambda self: 1 / 0)
        done = engine.submit(engine.prepare(HI), SamplingParams(max_tokens=4)).result(60)
    assert done.reason == "error" and "ZeroDivisionError" in done.error
    assert engine.submit(engine.prepare(HI), SamplingParams(max_tokens=4)).result(60).reason in (
        "stop", "length")


def test_a_remote_model_answers_what_its_prepare_made(remote_server):  # noqa: F811
    """A real server (`tandem serve` of a scripted model) renders the chat."""
    engine = RemoteModelEngine.load(RemoteSpec(f"{remote_server}/v1"))
    try:
        prepared = engine.prepare(HI)
        assert prepared.prompt_ids is None and prepared.messages == HI

        async def read(handle):
            return [event async for event in handle], await handle

        events, done = asyncio.run(read(engine.submit(prepared, SamplingParams(max_tokens=64),
                                                      tab_id="7")))
        assert done.reason == "stop" and done.text == SCRIPT
        assert "".join(e.text for e in events if isinstance(e, Token)) == SCRIPT
        assert engine.generate(HI, SamplingParams(max_tokens=64), timeout=60).text == SCRIPT
    finally:
        engine.close()


# ---- the handle: a thread reads it, or an event loop awaits it -----------------------------
def test_a_handle_is_awaited_by_an_event_loop(make_engine):
    engine = make_engine()

    async def read(handle):
        events = [event async for event in handle]
        return events, await handle

    handle = engine.submit(HI, SamplingParams(max_tokens=12))
    events, done = asyncio.run(read(handle))
    assert isinstance(events[-1], Finished) and events[-1] is done
    assert "".join(e.text for e in events if isinstance(e, Token)) == done.text
    assert done.output_tokens > 0
    # Read after it ended: every event is still there, in order.
    again = engine.submit(HI, SamplingParams(max_tokens=12))
    again.result(60)
    late, late_done = asyncio.run(read(again))
    assert "".join(e.text for e in late if isinstance(e, Token)) == late_done.text == done.text
    # The thread way reads the same.
    sync = engine.submit(HI, SamplingParams(max_tokens=12))
    assert "".join(e.text for e in sync if isinstance(e, Token)) == done.text


def test_a_cancelled_reader_leaves_no_wake_up_behind(make_engine):
    """An event loop that stops waiting (a client gone) is not woken later."""
    engine = make_engine()
    gate, held = threading.Event(), threading.Event()

    def hold(event):  # the delivery thread waits at the first request's first token
        if isinstance(event, Token) and not held.is_set():
            held.set()
            gate.wait(30)

    engine.subscribe(hold)
    first = engine.submit(HI, SamplingParams(max_tokens=400))
    assert held.wait(60)
    handle = engine.submit(HI, SamplingParams(max_tokens=4))  # its events wait in line

    async def awaited():
        return await handle

    async def give_up():
        reader = asyncio.ensure_future(anext(aiter(handle)))
        ending = asyncio.ensure_future(awaited())
        await asyncio.sleep(0)  # both wait now: nothing has reached the handle
        assert not reader.done() and not ending.done()
        reader.cancel()
        ending.cancel()
        await asyncio.gather(reader, ending, return_exceptions=True)

    try:
        asyncio.run(give_up())
        assert handle._waiters == []  # nothing to wake on a closed loop
    finally:
        gate.set()
    first.cancel()
    assert handle.result(60).output_tokens > 0
    assert [e for e in handle][-1] is handle.finished  # its events stayed to be read


# ---- readable units, and rooms through public names ----------------------------------------
OWNED = sorted(list((ROOT / "engine").glob("*.py")) + list((ROOT / "server").glob("*.py")))


def test_no_function_in_the_public_api_or_the_server_runs_over_60_lines():
    long = []
    for path in OWNED:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.relative_to(ROOT)}:{node.name} {lines} lines")
    assert long == []


def test_remotes_reach_the_engine_through_its_public_names():
    tree = ast.parse((ROOT / "engine" / "remotes.py").read_text())
    private = [ast.unparse(node) for node in ast.walk(tree)
               if isinstance(node, ast.Attribute) and node.attr.startswith("_")
               and "engine" in ast.unparse(node.value)]
    assert private == []
