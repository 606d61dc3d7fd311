"""What else must hold with drafts on (issue 32, part 3): a reasoning
model's thinking split from its answer, tool calls read from what it
writes, and the context's end. Scripted models drafting for themselves
(every greedy proposal right, so runs of several tokens commit in one
step) and lookup drafts on a random tool model; each answer is compared
with drafts off. The lane's width costs are made cheap so that every step
that can draft does: the machinery under test, not the policy."""

from __future__ import annotations

import json

import pytest

from engine import Engine, LaneConfig, LaneSpec, SamplingParams
from engine.models.loader import load_model
from tests.helpers import cheap_widths
from tests.scripted_model import build_scripted_model
from tests.test_server import WEATHER, Served
from tests.tool_models import QWEN25_TOOLS, build_tool_model

THOUGHT, ANSWER = "the quick brown", "hello world"


def _engine(path, drafts: str) -> Engine:
    loaded = load_model(str(path))
    draft = load_model(str(path)) if drafts == "model" else None
    engine = Engine(loaded, lanes=[LaneSpec("cpu", "cpu", "float32",
                                            config=LaneConfig(drafts=drafts))], draft=draft)
    assert engine.wait_ready(120, every_lane=True)
    if drafts != "off":
        cheap_widths(engine)
    return engine


@pytest.fixture(scope="module")
def thinker(tmp_path_factory):
    return build_scripted_model(tmp_path_factory.mktemp("think"),
                                f"<think>{THOUGHT}</think>{ANSWER}")


def test_thinking_comes_apart_from_the_answer_with_drafts_on(thinker):
    engine = _engine(thinker, "model")
    try:
        for params in (SamplingParams(max_tokens=30),
                       SamplingParams(max_tokens=30, temperature=0.9, top_p=0.95, seed=3)):
            done = engine.generate([{"role": "user", "content": "hi there"}], params,
                                   timeout=60)
            assert (done.reasoning, done.text, done.reason) == (THOUGHT, ANSWER, "stop")
            assert done.accepted_drafts > 0
        # Cut while thinking, inside an accepted run: thinking only.
        cut = engine.generate([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=3))
        assert cut.reason == "length" and cut.text == "" and THOUGHT.startswith(cut.reasoning)
    finally:
        engine.close()


def test_the_context_end_holds_inside_an_accepted_run(thinker):
    """A prompt a few tokens short of the model's 512: the answer stops at
    the context's end, as it does with drafts off, never past it."""
    answers = {}
    for drafts in ("off", "model"):
        engine = _engine(thinker, drafts)
        try:
            words = "the quick brown fox " * 200
            ids = engine.render([{"role": "user", "content": words}])
            ids = ids[-(engine.context_length - 6):]  # ends with the generation prompt
            done = engine.submit(prompt_ids=ids, params=SamplingParams(max_tokens=100),
                                 thinking=False).result(60)
            answers[drafts] = (done.reason, done.output_tokens, done.text)
            assert done.prompt_tokens + done.output_tokens <= engine.context_length
        finally:
            engine.close()
    assert answers["model"] == answers["off"] and answers["off"][0] == "length"


def test_tool_calls_come_apart_with_drafts_on(tmp_path):
    """A required call (constrained decoding: proposals cut to what the
    grammar allows) through the real openai client: the same call with
    lookup drafts as without."""
    path = build_tool_model(tmp_path / "qwen2.5", QWEN25_TOOLS)
    calls = {}
    for drafts in ("off", "lookup"):
        engine = _engine(path, drafts)
        served = Served(engine)
        try:
            done = served.client().chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "weather in Paris?"}],
                tools=WEATHER, tool_choice="required", max_tokens=120, temperature=0.7, seed=1)
            choice = done.choices[0]
            # "required" lets the model go on calling: cut inside a next call,
            # that one comes incomplete, with finish_reason "length".
            assert choice.finish_reason in ("tool_calls", "length")
            calls[drafts] = [(c.function.name, c.function.arguments)
                             for c in choice.message.tool_calls]
            json.loads(calls[drafts][0][1])  # the first is whole
        finally:
            served.stop()
            engine.close()
    assert calls["lookup"] == calls["off"]
