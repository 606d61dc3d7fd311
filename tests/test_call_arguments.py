"""Tool-call arguments JSON cannot carry, and calls max_tokens cuts (issue 48),
on every surface, with scripted models in Qwen2.5's tool format
(tests/scripted_calls.py) behind a real server, real SDK clients and a real
MCP server (tests/mcp_servers.py).

- `1e999` is JSON's grammar but no finite number: OpenAI's `arguments`
  (text) carry it as the model wrote it; Anthropic's `input` (an object)
  holds it as `_raw` text; the MCP loop runs nothing and tells the model.
  Before: Python read it as inf, wrote `Infinity` (not JSON), and a
  non-streamed /v1/messages answered 500.
- `NaN` is not JSON: the call is unreadable, kept as text, as invalid JSON is.
- A call max_tokens cuts is a call marked incomplete: chat completions'
  partial tool_calls with finish_reason "length", a Responses function_call
  with status "incomplete" in an incomplete response, an Anthropic tool_use
  block with the input written whole and stop_reason "max_tokens".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest

from engine import Engine, LaneSpec, load_model, strict_loads
from tests.scripted_calls import build_scripted_caller, call_pieces
from tests.test_server import Served

INF_ARGS = '{"city":"Paris","days":1e999}'
NAN_ARGS = '{"city":"Paris","days":NaN}'
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "number"}},
    "required": ["city"]}}}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


def _served(tmp_path_factory, name: str, pieces: list[str]):
    path = build_scripted_caller(tmp_path_factory.mktemp(name) / name, pieces)
    engine = Engine(load_model(str(path)), lanes=[LaneSpec("cpu", "cpu", "float32")])
    assert engine.wait_ready(120)
    return Served(engine), engine


@pytest.fixture(scope="module")
def inf_served(tmp_path_factory):
    """Calls get_weather with {"city":"Paris","days":1e999}, in 4 argument
    pieces: max_tokens 4 cuts the call after "Paris" (the marker, the name,
    the key, the city). (One piece '{"city":"Paris"' the forced-call grammar
    does not allow: llguidance masks a token that runs from a key into its value.)"""
    served, engine = _served(tmp_path_factory, "inf", call_pieces(
        "get_weather", ['{"city":', '"Paris"', ',"days":1e999', "}"]))
    yield served
    served.stop()
    engine.close()


@pytest.fixture(scope="module")
def nan_served(tmp_path_factory):
    served, engine = _served(tmp_path_factory, "nan", call_pieces("get_weather", [NAN_ARGS]))
    yield served
    served.stop()
    engine.close()


def _chat(served, **body) -> httpx.Response:
    return httpx.post(f"{served.url}/v1/chat/completions", timeout=60,
                      json={"model": "tiny", "messages": ASK, "tools": [WEATHER], **body})


def _sse(served, path: str, body: dict) -> list[dict]:
    with httpx.stream("POST", f"{served.url}{path}", json={**body, "stream": True},
                      timeout=60) as response:
        assert response.status_code == 200, response.read()
        return [json.loads(line[6:]) for line in response.iter_lines()
                if line.startswith("data: ") and line != "data: [DONE]"]


# ---- 1e999 ------------------------------------------------------------------------------
def test_chat_completions_carry_an_out_of_range_number_as_written(inf_served):
    oai = inf_served.client()
    done = oai.chat.completions.create(model="tiny", messages=ASK, tools=[WEATHER])
    call = done.choices[0].message.tool_calls[0]
    assert call.function.arguments == INF_ARGS and done.choices[0].finish_reason == "tool_calls"
    chunks = _sse(inf_served, "/v1/chat/completions",
                  {"model": "tiny", "messages": ASK, "tools": [WEATHER]})
    streamed = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks
                if c["choices"] and c["choices"][0]["delta"].get("tool_calls")]
    assert streamed[0]["function"]["arguments"] == INF_ARGS
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_responses_carry_an_out_of_range_number_as_written(inf_served):
    oai = inf_served.client()
    done = oai.responses.create(model="tiny", input="Weather in Paris?",
                                tools=[{"type": "function", **WEATHER["function"]}])
    calls = [o for o in done.output if o.type == "function_call"]
    assert calls[0].arguments == INF_ARGS and done.status == "completed"
    events = _sse(inf_served, "/v1/responses", {
        "model": "tiny", "input": "Weather in Paris?",
        "tools": [{"type": "function", **WEATHER["function"]}]})
    done_items = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done_items[0]["arguments"] == INF_ARGS and events[-1]["type"] == "response.completed"
    # Kept for previous_response_id: a follow-up renders it (no Infinity, no 500).
    follow = oai.responses.create(model="tiny", previous_response_id=done.id,
                                  max_output_tokens=2, tools=[{"type": "function",
                                                               **WEATHER["function"]}],
                                  input=[{"type": "function_call_output",
                                          "call_id": calls[0].call_id, "output": "sunny"}])
    assert follow.status in ("completed", "incomplete")


def test_messages_hold_an_out_of_range_number_as_raw_text(inf_served):
    """Non-streamed, this was a 500 (Starlette refuses to encode inf)."""
    claude = inf_served.claude()
    tool = {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}
    done = claude.messages.create(model="tiny", max_tokens=64, tools=[tool], messages=ASK)
    use = done.content[-1]
    assert use.type == "tool_use" and use.input == {"_raw": INF_ARGS}
    assert done.stop_reason == "tool_use"
    events = _sse(inf_served, "/v1/messages", {"model": "tiny", "max_tokens": 64,
                                               "tools": [tool], "messages": ASK})
    partial = "".join(e["delta"]["partial_json"] for e in events
                      if e["type"] == "content_block_delta"
                      and e["delta"]["type"] == "input_json_delta")
    assert strict_loads(partial) == {"_raw": INF_ARGS}


def test_the_mcp_loop_runs_no_call_with_an_out_of_range_number(tmp_path_factory, tmp_path):
    """Before, the call ran with inf, which reached the server as null."""
    from engine import SamplingParams
    from toolhost import loop
    from toolhost.config import ServerSpec
    from toolhost.host import ToolHost

    servers = str(Path(__file__).parent / "mcp_servers.py")
    host = ToolHost([ServerSpec("n", command=sys.executable,
                                args=(servers, "stdio", "numbers"))], log_dir=tmp_path)
    engines = []
    try:
        tools = [t for t in host.tools() if t.name == "scale"]
        for name, args, said in (("inf", '{"factor":1e999}', "not JSON a tool can take"),
                                 ("nan", '{"factor":NaN}', "could not be read")):
            path = build_scripted_caller(tmp_path_factory.mktemp(name) / name,
                                         call_pieces("scale", [args]))
            engine = Engine(load_model(str(path)), lanes=[LaneSpec("cpu", "cpu", "float32")])
            engines.append(engine)
            asked = []
            outcome = loop.run(engine, ASK, host, tools, lambda call: asked.append(call) or True,
                               SamplingParams(max_tokens=16), rounds=1)
            call = outcome.calls[0]
            assert not asked and call.result.is_error and said in call.result.text
            assert said in outcome.messages[2]["content"]  # the model is told
            json.dumps(outcome.messages, allow_nan=False)  # nothing JSON cannot carry
    finally:
        host.close()
        for engine in engines:
            engine.close()


# ---- NaN --------------------------------------------------------------------------------
def test_a_nan_argument_is_an_unreadable_call_kept_as_text(nan_served):
    raw = f'\n{{"name":"get_weather","arguments":{NAN_ARGS}}}\n'
    response = _chat(nan_served)
    message = response.json()["choices"][0]["message"]
    assert "tool_calls" not in message and message["content"] == raw
    claude = nan_served.claude()
    tool = {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}
    done = claude.messages.create(model="tiny", max_tokens=64, tools=[tool], messages=ASK)
    assert [b.type for b in done.content] == ["text"] and done.content[0].text == raw
    events = _sse(nan_served, "/v1/messages", {"model": "tiny", "max_tokens": 64,
                                               "tools": [tool], "messages": ASK})
    assert not any(e.get("content_block", {}).get("type") == "tool_use" for e in events)
    answer = nan_served.client().responses.create(
        model="tiny", input="Weather?", tools=[{"type": "function", **WEATHER["function"]}])
    assert [o.type for o in answer.output] == ["message"]
    assert answer.output[0].content[0].text == raw


# ---- a call max_tokens cuts -------------------------------------------------------------
def test_chat_completions_give_a_cut_call_with_finish_reason_length(inf_served):
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        response = _chat(inf_served, max_tokens=4, tool_choice=choice)
        choice_ = response.json()["choices"][0]
        call = choice_["message"]["tool_calls"][0]["function"]
        assert call == {"name": "get_weather", "arguments": '{"city":"Paris"'}
        assert choice_["finish_reason"] == "length" and choice_["message"]["content"] is None
    chunks = _sse(inf_served, "/v1/chat/completions", {
        "model": "tiny", "messages": ASK, "tools": [WEATHER], "tool_choice": "required",
        "max_tokens": 4})
    streamed = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks
                if c["choices"] and c["choices"][0]["delta"].get("tool_calls")]
    assert streamed[0]["function"]["arguments"] == '{"city":"Paris"'
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    # Cut before its name was whole (max_tokens 1: the marker alone): nothing to call.
    message = _chat(inf_served, max_tokens=1, tool_choice="required").json()["choices"][0]
    assert "tool_calls" not in message["message"] and message["finish_reason"] == "length"


def test_responses_give_a_cut_call_as_an_incomplete_item(inf_served):
    tools = [{"type": "function", **WEATHER["function"]}]
    oai = inf_served.client()
    done = oai.responses.create(model="tiny", input="Weather?", tools=tools,
                                tool_choice="required", max_output_tokens=4)
    assert done.status == "incomplete"
    assert done.incomplete_details.reason == "max_output_tokens"
    call = done.output[-1]
    assert call.type == "function_call" and call.status == "incomplete"
    assert call.arguments == '{"city":"Paris"'
    events = _sse(inf_served, "/v1/responses", {"model": "tiny", "input": "Weather?",
                                                "tools": tools, "tool_choice": "required",
                                                "max_output_tokens": 4})
    item = [e["item"] for e in events if e["type"] == "response.output_item.done"][-1]
    assert item["status"] == "incomplete" and item["arguments"] == '{"city":"Paris"'
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["output"][-1]["status"] == "incomplete"


def test_messages_give_a_cut_call_as_a_tool_use_and_max_tokens(inf_served):
    """As Anthropic's API: the last block is the tool_use, holding the input
    written whole, and stop_reason max_tokens."""
    claude = inf_served.claude()
    tool = {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}
    done = claude.messages.create(model="tiny", max_tokens=4, tools=[tool], messages=ASK,
                                  tool_choice={"type": "any"})
    assert done.stop_reason == "max_tokens"
    assert done.content[-1].type == "tool_use" and done.content[-1].input == {"city": "Paris"}
    with claude.messages.stream(model="tiny", max_tokens=4, tools=[tool], messages=ASK,
                                tool_choice={"type": "tool", "name": "get_weather"}) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "max_tokens" and final.content[-1].input == {"city": "Paris"}
    # Auto: the model called on its own, and max_tokens cut it the same way.
    auto = claude.messages.create(model="tiny", max_tokens=2, tools=[tool], messages=ASK)
    assert auto.stop_reason == "max_tokens" and auto.content[-1].type == "tool_use"
    assert auto.content[-1].input == {}  # cut before its arguments began


# ---- what a client sends ----------------------------------------------------------------
@pytest.mark.parametrize("number", ["1e999", "NaN", "-Infinity"])
def test_a_body_holding_a_number_json_cannot_write_is_a_400(inf_served, number):
    """Nothing a client sends can reach an answer as inf: a Responses body's
    metadata is echoed back (it was a 500), a past call's arguments are
    rendered into the prompt."""
    body = ('{"model": "tiny", "input": "hi", "max_output_tokens": 1, '
            f'"metadata": {{"x": {number}}}}}')
    response = httpx.post(f"{inf_served.url}/v1/responses", content=body, timeout=60,
                          headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert number in response.json()["error"]["message"]


# ---- the reading itself -----------------------------------------------------------------
def test_reading_finds_the_arguments_as_written_and_reads_a_cut_call():
    from engine.models.call_json import checked_call, cut_call, member_text, partial_input

    tricky = '{"s":"} \\" ,{","x":1e999}'  # braces and quotes inside a string
    raw = f'\n{{"name": "f", "arguments": {tricky}}}\n'
    assert checked_call(json.loads(raw), raw) == {"name": "f", "arguments": tricky}
    # A repeated key: the last one, the one json.loads keeps.
    twice = '{"name":"f","arguments":{"x":1},"arguments":{"x":1e999}}'
    assert checked_call(json.loads(twice), twice)["arguments"] == '{"x":1e999}'
    with pytest.raises(ValueError):
        checked_call(json.loads('{"name":"f","arguments":{"x":-Infinity}}'),
                     '{"name":"f","arguments":{"x":-Infinity}}')
    finite = json.loads('{"name":"f","arguments":{"x":1.5}}')
    assert checked_call(finite, "") == finite
    assert member_text('{"arguments": {"x": 1}} trailing', "arguments") == '{"x": 1}'
    assert member_text('not an object', "arguments") is None
    # Cut: inside a value, after one, inside the next key, inside the name.
    assert cut_call('{"name":"f","arguments":{"x":"ab') == {"name": "f",
                                                            "arguments": '{"x":"ab'}
    assert cut_call('{"name":"f","arguments":{"x":1},"ar')["arguments"] == '{"x":1}'
    assert cut_call('{"name":"f","arguments":{"x":1},"y":"a')["arguments"] == '{"x":1}'
    assert cut_call('{"name":"f","arguments":' + "[" * 100_000) is None  # never a crash
    assert cut_call('{"name":"f","argu') == {"name": "f", "arguments": ""}
    assert cut_call('{"name":"fu') is None and cut_call("<function=f>") is None
    assert partial_input('{"city":"Paris","days":3,"x":"ab') == {"city": "Paris", "days": 3}
    assert partial_input('{"x":1e999,"y":') == {} and partial_input("") == {}
