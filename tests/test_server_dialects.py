"""The Responses and Messages APIs (issue 35) through the official openai
and anthropic clients against a real server on a tiny model that carries
Qwen2.5's tool-call format (tests/tool_models.py): plain, streamed (events
in order), a tool round trip, json_schema output, previous_response_id
(its prefix warm), x-api-key; bad input answered in each dialect's error
shape, never a 500 and never a slot left taken."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from engine import Engine, LaneSpec, load_model
from tests.test_server import Served
from tests.tool_models import QWEN25_TOOLS, build_tool_model

KEY = "test-key"
CITY = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
        "required": ["city"], "additionalProperties": False}
FUNCTION = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
            "parameters": CITY}
TOOL = {"name": "get_weather", "description": "The weather in a city.", "input_schema": CITY}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = build_tool_model(tmp_path_factory.mktemp("dialects") / "qwen25", QWEN25_TOOLS)
    engine = Engine(load_model(str(path)), lanes=[LaneSpec("cpu", "cpu", "float32")])
    assert engine.wait_ready(120)
    s = Served(engine, api_key=KEY)
    yield s
    s.stop()
    engine.close()


@pytest.fixture
def oai(served):
    return served.client(key=KEY)


@pytest.fixture
def claude(served):
    client = anthropic.Anthropic(base_url=served.url, api_key=KEY, max_retries=0)
    yield client
    client.close()


def _slots_free(served):
    """Every slot given back: a stream's is, just before its access-log line."""
    slots = served.server.config.app.state.slots
    with served._logged:
        assert served._logged.wait_for(lambda: slots.in_flight == 0, 30)


# ---- /v1/responses ----------------------------------------------------------------------
def test_a_response_whole_and_streamed(served, oai):
    whole = oai.responses.create(model="tiny", input="Hello there", max_output_tokens=6)
    assert whole.id.startswith("resp_") and whole.status == "incomplete"
    assert whole.incomplete_details.reason == "max_output_tokens"
    assert whole.output[0].type == "message" and whole.output_text
    assert whole.usage.output_tokens == 6 and whole.usage.input_tokens > 0
    events = list(oai.responses.create(model="tiny", input="Hello there", max_output_tokens=6,
                                       stream=True))
    kinds = [e.type for e in events]
    assert kinds[:5] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added",
                         "response.output_text.delta"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.incomplete"]
    assert [e.sequence_number for e in events] == list(range(1, len(events) + 1))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == events[-1].response.output_text == whole.output_text  # greedy: the same
    _slots_free(served)


def test_json_schema_output_completes(oai):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    done = oai.responses.create(model="tiny", input="Answer in JSON.", max_output_tokens=64,
                                text={"format": {"type": "json_schema", "name": "answer",
                                                 "schema": schema, "strict": True}})
    assert done.status == "completed" and json.loads(done.output_text) in ({"ok": True},
                                                                            {"ok": False})


def test_a_function_tool_round_trip_and_a_warm_follow_up(served, oai):
    first = oai.responses.create(model="tiny", input="What is the weather in Paris?",
                                 tools=[FUNCTION], tool_choice="required",
                                 max_output_tokens=64)
    calls = [o for o in first.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather" and calls[0].status == "completed"
    # "required" lets the model go on calling: cut inside a next call, it is incomplete.
    assert first.status == "completed" or first.incomplete_details.reason == "max_output_tokens"
    assert json.loads(calls[0].arguments)["city"] in ("Paris", "Oslo")
    follow = oai.responses.create(model="tiny", previous_response_id=first.id,
                                  tools=[FUNCTION], max_output_tokens=4,
                                  input=[{"type": "function_call_output",
                                          "call_id": calls[0].call_id, "output": "sunny"}])
    # The conversation was kept: the follow-up's prompt starts with the first one's.
    assert follow.usage.input_tokens_details.cached_tokens > first.usage.input_tokens // 2
    with oai.responses.stream(model="tiny", input="What is the weather in Oslo?",
                              tools=[FUNCTION], max_output_tokens=64,
                              tool_choice={"type": "function", "name": "get_weather"}) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in kinds
    assert kinds.index("response.output_item.added") < kinds.index(
        "response.function_call_arguments.done") < kinds.index("response.output_item.done")
    assert kinds[-1] == "response.completed" and final.output[0].type == "function_call"
    _slots_free(served)


def test_an_unknown_previous_response_or_call_is_a_clear_error(served, oai):
    with pytest.raises(openai.NotFoundError, match="not found"):
        oai.responses.create(model="tiny", input="hi", previous_response_id="resp_nope")
    with pytest.raises(openai.BadRequestError, match="No tool call found"):
        oai.responses.create(model="tiny", input=[{"type": "function_call_output",
                                                   "call_id": "call_x", "output": "y"}])
    with pytest.raises(openai.BadRequestError, match="not supported"):
        oai.responses.create(model="tiny", input=[{"type": "computer_call_output"}])
    with pytest.raises(openai.BadRequestError, match="function tools only"):
        oai.responses.create(model="tiny", input="hi", tools=[{"type": "web_search"}])
    with pytest.raises(openai.BadRequestError, match="more than"):
        oai.responses.create(model="tiny", input=[{"role": "user", "content": "x"}] * 10_000)
    # A text model refuses images before any is read, a bad one too (issue 47); a
    # vision model's refusals of bad images: test_image_limits.py.
    with pytest.raises(openai.BadRequestError, match="cannot read images: it is a text model"):
        oai.responses.create(model="tiny", input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}])
    with pytest.raises(openai.BadRequestError, match="cannot read images: it is a text model"):
        oai.responses.create(model="tiny", input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": _png_url()}]}])
    _slots_free(served)


def _png_url() -> str:
    import base64
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def test_a_prompt_over_the_context_fails_the_response(served, oai):
    long = "word " * 6000  # the model's context is 4,096 tokens
    with pytest.raises(openai.BadRequestError) as caught:
        oai.responses.create(model="tiny", input=long)
    assert caught.value.code == "context_length_exceeded"
    events = list(oai.responses.create(model="tiny", input=long, stream=True))
    assert [e.type for e in events] == ["response.created", "response.failed"]
    assert events[-1].response.error.code == "context_length_exceeded"
    _slots_free(served)


# ---- /v1/messages -----------------------------------------------------------------------
def test_a_message_whole_and_streamed(served, claude):
    whole = claude.messages.create(model="tiny", max_tokens=6, system="Be brief.",
                                   messages=[{"role": "user", "content": "Hello"}])
    assert whole.id.startswith("msg_") and whole.stop_reason == "max_tokens"
    assert whole.content[0].type == "text" and whole.usage.output_tokens == 6
    with claude.messages.stream(model="tiny", max_tokens=6, system="Be brief.",
                                messages=[{"role": "user", "content": "Hello"}]) as stream:
        kinds = [e.type for e in stream if e.type not in ("text", "input_json")]
        final = stream.get_final_message()
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert final.content[0].text == whole.content[0].text  # greedy: the same
    _slots_free(served)


def test_a_tool_use_round_trip(served, claude):
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = claude.messages.create(model="tiny", max_tokens=64, tools=[TOOL],
                                   tool_choice={"type": "any"}, messages=ask)
    uses = [b for b in first.content if b.type == "tool_use"]
    # "any" lets the model go on calling: cut inside a next call, it is max_tokens.
    assert first.stop_reason in ("tool_use", "max_tokens") and uses
    assert uses[0].input["city"] in ("Paris", "Oslo")
    second = claude.messages.create(
        model="tiny", max_tokens=4, tools=[TOOL],
        messages=ask + [{"role": "assistant", "content": first.content},
                        {"role": "user", "content": [{"type": "tool_result",
                                                      "tool_use_id": uses[0].id,
                                                      "content": "sunny"}]}])
    assert second.usage.cache_read_input_tokens > 0  # the first turn's prefix, warm
    with claude.messages.stream(model="tiny", max_tokens=64, tools=[TOOL],
                                tool_choice={"type": "tool", "name": "get_weather"},
                                messages=ask) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[0].type == "tool_use"
    _slots_free(served)


def test_output_config_format_is_honoured_through_the_grammar(served, claude):
    """output_config.format (and the older top-level output_format, the
    structured-outputs beta) as the same grammar as response_format."""
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    ask = [{"role": "user", "content": "Answer in JSON."}]
    done = claude.messages.create(model="tiny", max_tokens=64, messages=ask, output_config={
        "effort": "low", "format": {"type": "json_schema", "schema": schema}})
    assert done.stop_reason == "end_turn"
    assert json.loads(done.content[0].text) in ({"ok": True}, {"ok": False})
    older = claude.messages.create(model="tiny", max_tokens=64, messages=ask, extra_body={
        "output_format": {"type": "json_schema", "schema": schema}})
    assert older.content[0].text == done.content[0].text  # greedy: the same
    with pytest.raises(anthropic.BadRequestError, match="output_config.format"):
        claude.messages.create(model="tiny", max_tokens=4, messages=ask,
                               output_config={"format": {"type": "json_object"}})
    _slots_free(served)


def test_messages_errors_are_in_anthropics_shape(served, claude):
    with pytest.raises(anthropic.BadRequestError, match="corresponding tool_use"):
        claude.messages.create(model="tiny", max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_x", "content": "y"}]}])
    with pytest.raises(anthropic.AuthenticationError):
        served.claude("wrong").messages.create(
            model="tiny", max_tokens=4, messages=[{"role": "user", "content": "x"}])
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="claude-x", max_tokens=4,
                               messages=[{"role": "user", "content": "x"}])
    raw = httpx.post(f"{served.url}/v1/messages", headers={"x-api-key": KEY},
                     json={"model": "tiny", "messages": [{"role": "user", "content": "x"}]})
    assert raw.status_code == 400 and raw.json()["type"] == "error"
    assert raw.json()["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in raw.json()["error"]["message"]
    many = [{"role": "user", "content": "x"}] * 10_000
    raw = httpx.post(f"{served.url}/v1/messages", headers={"authorization": f"Bearer {KEY}"},
                     json={"model": "tiny", "max_tokens": 4, "messages": many})
    assert raw.status_code == 400 and raw.json()["error"]["type"] == "invalid_request_error"
    _slots_free(served)


def test_a_reasoning_models_thinking_in_both_dialects(tmp_path):
    """A model that thinks (a scripted Qwen3-like model: tests/scripted_model.py):
    its thinking is a reasoning item (Responses, counted in reasoning_tokens)
    and a thinking block (Messages), apart from the answer, whole and streamed."""
    from tests.scripted_model import build_scripted_model

    path = build_scripted_model(tmp_path / "thinker", "<think>the quick brown</think>hello world")
    engine = Engine(load_model(str(path)), lanes=[LaneSpec("cpu", "cpu", "float32")])
    assert engine.wait_ready(120)
    served = Served(engine)
    try:
        oai = served.client()
        done = oai.responses.create(model="tiny", input="hi", max_output_tokens=32)
        assert [o.type for o in done.output] == ["reasoning", "message"]
        assert done.output[0].content[0].text == "the quick brown"
        assert done.output_text == "hello world" and done.status == "completed"
        assert 0 < done.usage.output_tokens_details.reasoning_tokens < done.usage.output_tokens
        kinds = [e.type for e in oai.responses.create(model="tiny", input="hi",
                                                      max_output_tokens=32, stream=True)]
        assert kinds.index("response.reasoning_text.delta") < kinds.index(
            "response.output_text.delta") and kinds[-1] == "response.completed"
        claude = served.claude()
        message = claude.messages.create(model="tiny", max_tokens=32,
                                         messages=[{"role": "user", "content": "hi"}])
        assert [b.type for b in message.content] == ["thinking", "text"]
        assert message.content[0].thinking == "the quick brown"
        assert message.content[1].text == "hello world" and message.stop_reason == "end_turn"
        with claude.messages.stream(model="tiny", max_tokens=32,
                                    messages=[{"role": "user", "content": "hi"}]) as stream:
            final = stream.get_final_message()
        assert [b.type for b in final.content] == ["thinking", "text"]
        claude.close()
    finally:
        served.stop()
        engine.close()


def test_the_response_store_is_bounded_in_count_and_bytes():
    from server.responses import ResponseStore

    store = ResponseStore(limit=3, max_bytes=10_000)
    turn = [{"role": "user", "content": "x" * 3000}]
    for i in range(4):
        store.put("key", f"r{i}", f"r{i - 1}" if i else None, turn)
    assert store.history("key", "r0") is None  # the oldest went (bytes: 4 x 3 KB > 10 KB)
    assert store.history("key", "r3") is None  # its chain lost a link: not found
    store.put("key", "solo", None, turn)
    assert store.history("key", "solo") == turn and store.history("other", "solo") is None
    store.put("key", "huge", None, [{"role": "user", "content": "y" * 20_000}])
    assert store.history("key", "huge") is None  # over the whole budget: not kept


# The generated fuzz of these two dialects' bodies (and /v1/embeddings') is
# tests/test_server_fuzz.py: 500 bodies each, with hostile values (issue 47).
