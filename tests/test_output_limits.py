"""A request without an output limit runs to its natural end (issue 48):
Codex sends no max_output_tokens, and Tandem's old default of 512 cut every
longer answer ("Incomplete response returned, reason: max_output_tokens").

A scripted model in Qwen2.5's tool format (tests/scripted_calls.py) writes
530 tokens (past the old 512, and past where an answer's first 512-token
reservation grows) and then its end-of-turn token, whatever it is asked. Codex's
recorded request (tests/data/codex_request.json, tests/test_codex_replay.py)
without max_output_tokens, chat completions and completions without
max_tokens: each answer is the whole script, finished by the model. In the
engine, such an answer reserves KV 512 tokens at a time as it grows
(engine/core/reservation.py): it never takes a lane's whole context up
front, and it ends, `length`, only where its lane has no room to grow.
"""

from __future__ import annotations

from typing import Callable

import pytest

from engine import Engine, LaneConfig, LaneSpec, Queued, SamplingParams, load_model
from engine.core.reservation import GROW_AHEAD, OPEN_STEP
from tests.scripted_calls import build_scripted_caller
from tests.test_codex_replay import CAPTURED, CODEX_CORPUS, CODEX_VOCAB, _events, _shortened
from tests.test_server import Served

WORDS = [f"<w{i}>" for i in range(530)]
SCRIPT = "".join(WORDS)
ASK = [{"role": "user", "content": "Write a long patch."}]


@pytest.fixture(scope="module")
def long_model(tmp_path_factory):
    return build_scripted_caller(tmp_path_factory.mktemp("long") / "long", WORDS,
                                 max_positions=32768, corpus=CODEX_CORPUS, vocab=CODEX_VOCAB)


@pytest.fixture(scope="module")
def served(long_model):
    engine = Engine(load_model(str(long_model)), lanes=[LaneSpec("cpu", "cpu", "float32")])
    assert engine.wait_ready(120)
    s = Served(engine)
    yield s
    s.stop()
    engine.close()


def test_codexs_request_without_max_output_tokens_runs_to_its_end(served):
    body = _shortened(CAPTURED)
    assert "max_output_tokens" not in body  # as Codex sends it
    events = _events(served, body)
    final = events[-1]
    assert final["type"] == "response.completed", final["response"].get("incomplete_details")
    response = final["response"]
    assert response["output"][-1]["content"][0]["text"] == SCRIPT
    assert response["usage"]["output_tokens"] > 512
    assert response["max_output_tokens"] is None


def test_chat_completions_and_completions_without_max_tokens_run_to_their_end(served):
    oai = served.client()
    chat = oai.chat.completions.create(model="tiny", messages=ASK)
    assert chat.choices[0].finish_reason == "stop"
    assert chat.choices[0].message.content == SCRIPT and chat.usage.completion_tokens > 512
    prompt = served.engine.tokenizer.apply_chat_template(ASK, add_generation_prompt=True,
                                                         tokenize=False)
    text = oai.completions.create(model="tiny", prompt=prompt)
    assert text.choices[0].finish_reason == "stop" and text.choices[0].text == SCRIPT
    # A limit given is kept.
    cut = oai.chat.completions.create(model="tiny", messages=ASK, max_tokens=7)
    assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens == 7


def _engine(model, budget: Callable[[int], int]) -> Engine:
    """An engine whose lane has KV for `budget(prompt length of ASK)` tokens."""
    probe = Engine(load_model(str(model)), lanes=[LaneSpec("cpu", "cpu", "float32")])
    per_token, tokens = probe.memory_plan.kv_bytes_per_token, budget(len(probe.render(ASK)))
    probe.close()
    engine = Engine(load_model(str(model)), lanes=[LaneSpec(
        "cpu", "cpu", "float32", LaneConfig(kv_budget_bytes=tokens * per_token))])
    assert engine.wait_ready(120)
    return engine


def test_an_open_ended_answer_reserves_as_it_grows_beside_others(long_model):
    """A lane with KV for 2,200 tokens (the context is 32,768): an answer
    without a limit starts beside a limited one, neither waits, and it grows
    to its end once the other is done. Reserving the context up front, it was
    refused ("too-large-for-memory")."""
    engine = _engine(long_model, lambda prompt: 2200)
    try:
        waited = []
        engine.subscribe(lambda e: waited.append(e) if isinstance(e, Queued) and e.reason
                         else None)
        prompt = engine.render(ASK)
        free = engine.submit(prompt_ids=prompt, params=SamplingParams(max_tokens=None))
        short = engine.submit(prompt_ids=prompt, params=SamplingParams(max_tokens=8))
        assert short.result(120).reason == "length"
        done = free.result(300)
        assert done.reason == "stop" and done.text == SCRIPT and not waited
        assert free.request.kv_tokens == len(prompt) + 2 * OPEN_STEP  # grown once
    finally:
        engine.close()


def test_an_open_ended_answer_ends_where_its_lane_has_no_room(long_model):
    """KV for its prompt and 612 tokens, not for the next 512 it would grow
    by: it ends there, `length` (as at the context's end), never past the
    lane's budget."""
    engine = _engine(long_model, lambda prompt: prompt + OPEN_STEP + 100)
    try:
        done = engine.generate(prompt_ids=engine.render(ASK),
                               params=SamplingParams(max_tokens=None), timeout=300)
        assert done.reason == "length"
        assert done.output_tokens == OPEN_STEP - GROW_AHEAD + 1
        assert done.text == "".join(WORDS[:done.output_tokens])
    finally:
        engine.close()


def test_a_remote_is_sent_no_max_tokens_where_the_client_set_none():
    """A remote server (vLLM, llama.cpp, another Tandem) then runs to its own
    context's end; a limit given is passed on."""
    from engine.core.remote import RemoteSpec
    from engine.remote_model import RemoteModelEngine
    from tests.hostile_server import DONE, HostileServer, event

    server = HostileServer().start()
    engine = RemoteModelEngine.load(RemoteSpec(f"{server.url}/v1", stall_s=2.0))
    try:
        bodies = []
        server.answer = lambda body, auth: (bodies.append(body)
                                            or (200, [event(body, "Hi", "stop"), DONE]))
        assert engine.submit(ASK, SamplingParams(max_tokens=None)).result(30).reason == "stop"
        assert engine.submit(ASK, SamplingParams(max_tokens=9)).result(30).reason == "stop"
        assert "max_tokens" not in bodies[-2] and bodies[-1]["max_tokens"] == 9
    finally:
        engine.close()
        server.close()
