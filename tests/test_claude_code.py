"""Current Claude Code against a real server (issue 48): the request 2.1.x
sends (tests/data/claude_code_request.json, and the real 2.1.197 recording
beside it, texts cut short: a system prompt in cached text
blocks, tools with input_schema, one deferred, a system message inside
`messages`, adaptive thinking with display "omitted", context_management,
output_config.effort, metadata.user_id, its beta headers, its default
model id) is answered; count_tokens counts what that request puts in the
prompt; model ids map through --alias; unknown fields are named all at once.

The model is a tiny llama scripted to think, then answer (tests/scripted_model.py),
in Qwen3's tool template (tests/tool_models.py), so each answer is known."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import anthropic
import httpx
import pytest

from engine import Engine, LaneSpec, load_model
from tests.scripted_model import build_scripted_model
from tests.test_server import Served
from tests.tool_models import QWEN3_TOOLS, TOOL_TOKENS

DATA = Path(__file__).parent / "data"
RECORDED = json.loads((DATA / "claude_code_request.json").read_text())
HEADERS, BODY = RECORDED["headers"], RECORDED["body"]
# Recorded from the real client (its texts cut short): its 25 tools' schemas as sent.
REAL = json.loads((DATA / "claude_code_2.1.197_request.json").read_text())
KEY = "test-key"
SCRIPT = "<think>the quick brown</think>hello world"
CONTEXT = 32768  # the real recording is 25,420 tokens in the scripted model's small vocabulary


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = build_scripted_model(tmp_path_factory.mktemp("claude") / "thinker", SCRIPT,
                                template=QWEN3_TOOLS, extra_tokens=tuple(TOOL_TOKENS),
                                max_positions=CONTEXT)
    engine = Engine(load_model(str(path)), lanes=[LaneSpec("cpu", "cpu", "float32")])
    assert engine.wait_ready(120)
    s = Served(engine, api_key=KEY, aliases=(("claude-*", "default"), ("haiku", "tiny")))
    yield s
    s.stop()
    engine.close()


@pytest.fixture
def claude(served):
    client = anthropic.Anthropic(base_url=served.url, api_key=KEY, max_retries=0)
    yield client
    client.close()


def _sse(response: httpx.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]


def _post(served, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{served.url}{path}?beta=true", json=body, timeout=120,
                      headers={**HEADERS, "x-api-key": KEY})


@pytest.mark.parametrize("recorded", [RECORDED, REAL], ids=["shape", "claude-2.1.197"])
def test_the_recorded_claude_code_request_is_answered(served, recorded):
    """As Claude Code sends it: streamed, its headers, ?beta=true, its model
    id (mapped by the 'claude-*' alias). The thinking block comes without its
    text (display "omitted", in the shape's request), then the answer, then end_turn."""
    body, headers = recorded["body"], recorded["headers"]
    with httpx.stream("POST", f"{served.url}/v1/messages?beta=true", json=body, timeout=120,
                      headers={**headers, "x-api-key": KEY}) as r:
        assert r.status_code == 200, r.read()
        events = _sse(r)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert [b["type"] for b in starts] == ["thinking", "text"]
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    thought = "".join(d.get("thinking", "") for d in deltas if d["type"] == "thinking_delta")
    omitted = body["thinking"].get("display") == "omitted"
    assert thought == ("" if omitted else "the quick brown")
    assert "".join(d.get("text", "") for d in deltas) == "hello world"
    assert events[-2]["delta"]["stop_reason"] == "end_turn"
    assert events[-2]["usage"]["output_tokens"] > 0


def test_the_sdk_sends_it_and_counts_its_tokens(served, claude):
    """The official SDK's beta client (as Claude Code's is: ?beta=true, the
    betas as a header, streamed): the answer, and count_tokens equal to the
    prompt the answer was generated from (input plus cache-read tokens)."""
    fields = {k: v for k, v in BODY.items() if k != "stream"}
    betas = HEADERS["anthropic-beta"].split(",")
    with claude.beta.messages.stream(**fields, betas=betas) as stream:
        message = stream.get_final_message()
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "" and message.content[1].text == "hello world"
    assert message.stop_reason == "end_turn"
    prompt = message.usage.input_tokens + message.usage.cache_read_input_tokens
    counted = claude.beta.messages.count_tokens(
        betas=betas, **{k: v for k, v in fields.items()
                        if k not in ("max_tokens", "metadata")})
    assert counted.input_tokens == prompt > 1000
    assert claude.messages.count_tokens(  # the plain client, context_management as extra
        model="claude-opus-4-8", messages=BODY["messages"], system=BODY["system"],
        tools=BODY["tools"], extra_body={"context_management": BODY["context_management"]}
    ).input_tokens == prompt
    # The whole body (max_tokens, stream, metadata too) counts the same.
    assert _post(served, "/v1/messages/count_tokens", BODY).json() == {"input_tokens": prompt}


def test_the_system_message_inside_stays_at_its_place(served):
    """The template renders a system turn where the message was: the prompt
    is the template's own rendering of the chat with it there."""
    tokenizer = served.engine.tokenizer._tokenizer
    body = {"model": "haiku", "max_tokens": 4, "system": "Be brief.", "messages": [
        {"role": "user", "content": "hi"}, {"role": "system", "content": "Answer in French."}]}
    counted = _post(served, "/v1/messages/count_tokens", body).json()["input_tokens"]
    expected = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
         {"role": "system", "content": "Answer in French."}], add_generation_prompt=True,
        return_dict=True)["input_ids"]
    assert counted == len(expected)
    # clear_at next_user_message: shown only until a later user turn exists
    later = copy.deepcopy(body)
    later["messages"][1]["clear_at"] = "next_user_message"
    later["messages"] += [{"role": "assistant", "content": "ok"},
                          {"role": "user", "content": "again"}]
    without = {**later, "messages": [later["messages"][0]] + later["messages"][2:]}
    assert _post(served, "/v1/messages/count_tokens", later).json() == \
        _post(served, "/v1/messages/count_tokens", without).json()


def test_unknown_fields_are_named_all_at_once(served, claude):
    body = {**BODY, "stream": False, "frobnicate": 1, "container": "c1",
            "output_config": {"effort": "high", "efort": "low"}, "metadata": {"user": "x"}}
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = _post(served, path, body)
        assert r.status_code == 400 and r.json()["type"] == "error"
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["message"] == ("frobnicate, container, metadata.user, "
                                    "output_config.efort: Extra inputs are not permitted.")
    with pytest.raises(anthropic.BadRequestError, match="compact_20260112"):
        claude.messages.create(model="haiku", max_tokens=4, messages=BODY["messages"][:1],
                               extra_body={"context_management": {
                                   "edits": [{"type": "compact_20260112"}]}})


def test_a_model_id_maps_only_through_an_alias(served, claude):
    ok = claude.messages.create(model="haiku", max_tokens=32,
                                messages=[{"role": "user", "content": "hi"}])
    assert ok.content[-1].text == "hello world"
    with pytest.raises(anthropic.NotFoundError, match="--alias gpt-5=default "):
        claude.messages.create(model="gpt-5", max_tokens=4,
                               messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.NotFoundError, match="--alias"):
        claude.messages.count_tokens(model="gpt-5", messages=[{"role": "user", "content": "hi"}])
    # The OpenAI endpoints answer to the same names.
    oai = served.client(key=KEY)
    assert oai.chat.completions.create(model="claude-sonnet-5", max_tokens=32, messages=[
        {"role": "user", "content": "hi"}]).choices[0].message.content == "hello world"


def test_models_are_listed_in_the_callers_dialect(served, claude):
    """Anthropic's shape to a caller that sends anthropic-version (the SDK,
    Claude Code's gateway discovery), with the exact aliases; OpenAI's to
    any other. A glob names no model: it is not listed."""
    listed = claude.models.list()
    assert [m.id for m in listed.data] == ["tiny", "haiku"]
    assert listed.data[1].display_name == "haiku (tiny)" and not listed.has_more
    page = claude.models.list(limit=1)
    assert [m.id for m in page.data] == ["tiny"] and page.has_more
    assert [m.id for m in claude.models.list(after_id="tiny").data] == ["haiku"]
    raw = httpx.get(f"{served.url}/v1/models", headers={"authorization": f"Bearer {KEY}"})
    assert [m["id"] for m in raw.json()["data"]] == ["tiny", "haiku"]
    assert raw.json()["object"] == "list"


def test_a_deferred_tool_is_offered_once_a_tool_reference_loads_it(served):
    """defer_loading: the tool is not in the prompt until a tool_result holds
    a tool_reference to it (Claude Code's ToolSearch); then it is, as if it
    had never been deferred."""
    tools = BODY["tools"]
    plain = [{k: v for k, v in t.items() if k != "defer_loading"} for t in tools]
    ask = BODY["messages"][:3]
    loaded = copy.deepcopy(ask)
    loaded[2]["content"][0]["content"] = [
        {"type": "text", "text": "app.py"},
        {"type": "tool_reference", "tool_name": "mcp__github__create_issue"}]

    def count(messages, offered):
        r = _post(served, "/v1/messages/count_tokens",
                  {"model": "haiku", "messages": messages, "tools": offered})
        assert r.status_code == 200, r.text
        return r.json()["input_tokens"]

    without = [t for t in plain if t["name"] != "mcp__github__create_issue"]
    assert count(ask, tools) == count(ask, without) < count(ask, plain)
    assert count(loaded, tools) == count(loaded, plain)


# A template that takes a system message only first, as Gemma's and Mistral's do.
STRICT = ("{% for message in messages %}"
          "{% if message['role'] == 'system' and not loop.first %}"
          "{{ raise_exception('System role only at the start') }}{% endif %}"
          "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_a_template_that_refuses_it_gets_it_folded_into_the_user_turn(tmp_path):
    """The system message becomes <system-reminder> text at the end of the
    user turn before it (as Claude Code itself falls back): the request is
    answered and counted as that chat renders."""
    path = build_scripted_model(tmp_path / "strict", SCRIPT, template=STRICT)
    engine = Engine(load_model(str(path)), lanes=[LaneSpec("cpu", "cpu", "float32")])
    assert engine.wait_ready(120)
    served = Served(engine)
    try:
        claude = served.claude()
        chat = [{"role": "user", "content": "hi"},
                {"role": "system", "content": [{"type": "text", "text": "Answer in French."}]}]
        done = claude.messages.create(model="tiny", max_tokens=32, system="Be brief.",
                                      messages=chat)
        assert done.content[-1].text == "hello world" and done.stop_reason == "end_turn"
        counted = claude.messages.count_tokens(model="tiny", system="Be brief.", messages=chat)
        folded = engine.tokenizer._tokenizer.apply_chat_template(
            [{"role": "system", "content": "Be brief."},
             {"role": "user", "content": "hi\n\n<system-reminder>\nAnswer in French.\n"
                                         "</system-reminder>"}],
            add_generation_prompt=True, return_dict=True)["input_ids"]
        assert counted.input_tokens == len(folded)
        assert done.usage.input_tokens + done.usage.cache_read_input_tokens == len(folded)
    finally:
        served.stop()
        engine.close()


def test_the_fold_keeps_each_system_message_next_to_its_place():
    from server.messages_blocks import folded

    chat = [{"role": "system", "content": "top"}, {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "system", "content": "<system-reminder>after b</system-reminder>"},
            {"role": "tool", "tool_call_id": "1", "content": "r"},
            {"role": "system", "content": "after r"},
            {"role": "assistant", "content": "c"}, {"role": "system", "content": "last"}]
    assert folded(chat) == [
        {"role": "system", "content": "top"}, {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "tool", "tool_call_id": "1", "content": "<system-reminder>after b"
         "</system-reminder>\n\nr\n\n<system-reminder>\nafter r\n</system-reminder>"},
        {"role": "assistant", "content": "c"},
        {"role": "user", "content": "<system-reminder>\nlast\n</system-reminder>"}]


def test_serve_refuses_an_alias_it_cannot_honour(tiny_model_dir):
    import os
    import subprocess
    import sys

    env = dict(os.environ, HF_HUB_OFFLINE="1")
    for args, said in ((["--alias", "claude-opus-4-8"], "expected NAME=MODEL"),
                       (["--model", str(tiny_model_dir), "--alias", "claude-x=nothing"],
                        "MODEL must be one of them")):
        done = subprocess.run([sys.executable, "-m", "app", "serve", "--port", "0", *args],
                              capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 2 and said in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_a_prompt_past_the_context_is_too_long_in_anthropics_words(served, claude):
    """Claude Code compacts on "prompt is too long: N tokens > M maximum"
    (a 400); count_tokens still counts such a prompt."""
    long = [{"role": "user", "content": "hello world " * 18000}]
    counted = claude.messages.count_tokens(model="haiku", messages=long).input_tokens
    assert counted > CONTEXT
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model="haiku", max_tokens=4, messages=long)
    assert refused.value.body["error"] == {
        "type": "invalid_request_error",
        "message": f"prompt is too long: {counted} tokens > {CONTEXT} maximum"}


def test_a_stop_sequence_is_named_as_anthropic_names_it(claude):
    """stop_reason "stop_sequence" and the sequence that ended the answer,
    whole and streamed; the text stops before it."""
    ask = {"model": "haiku", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}],
           "stop_sequences": ["nothing here", " world"]}
    message = claude.messages.create(**ask)
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == " world"
    assert message.content[-1].text == "hello"
    with claude.messages.stream(**ask) as stream:
        streamed = stream.get_final_message()
    assert (streamed.stop_reason, streamed.stop_sequence) == ("stop_sequence", " world")
    plain = claude.messages.create(**{**ask, "stop_sequences": ["nothing here"]})
    assert plain.stop_reason == "end_turn" and plain.stop_sequence is None
