"""A request captured from Codex CLI 0.169.0 (`codex exec "Say hi"` against a
capturing server, with `web_search = "disabled"` as the README's steps say;
tests/data/codex_request.json: its ~18 KB developer prompt, function tools,
a namespace of sub-agent tools, include / store / prompt_cache_key /
client_metadata) replayed against a real server on a tiny random model in
Qwen2.5's tool format with a 32k context (tests/tool_models.py; its tokenizer
trained on the request too, as a real one knows English and JSON): the events
Codex reads come in order, the second turn's prefix is warm, and the hosted
web_search tool a default Codex config sends is refused saying how to turn
it off. (The text is noise: the protocol is what is checked.)"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from engine import Engine, LaneSpec, load_model
from tests.test_server import Served
from tests.tool_models import QWEN25_TOOLS, build_tool_model

CAPTURED = json.loads((Path(__file__).parent / "data" / "codex_request.json").read_text())
# What a model's tokenizer is trained on for the request to take ~7,000 tokens
# (not the 19,000 of the tiny models' 400-token vocabulary: a prefill 6x longer).
CODEX_CORPUS = (json.dumps(CAPTURED),)
CODEX_VOCAB = 2000


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = build_tool_model(tmp_path_factory.mktemp("codex") / "qwen25-32k", QWEN25_TOOLS,
                            max_positions=32768, corpus=CODEX_CORPUS, vocab=CODEX_VOCAB)
    engine = Engine(load_model(str(path)), lanes=[LaneSpec("cpu", "cpu", "float32")])
    assert engine.wait_ready(120)
    s = Served(engine)
    yield s
    s.stop()
    engine.close()


def _events(served, body: dict) -> list[dict]:
    events = []
    with httpx.stream("POST", f"{served.url}/v1/responses", json=body, timeout=300,
                      headers={"accept": "text/event-stream"}) as response:
        assert response.status_code == 200, response.read()
        kind = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                assert data["type"] == kind  # the event line names the data's type
                events.append(data)
    return events


def _shortened(captured: dict) -> dict:
    """The request with its 17 KB developer prompt cut to 2,000 characters
    (the whole of it would take 11,000 tokens even with CODEX_VOCAB, 30,000
    with the tiny models' 400); the tools, items and fields Codex sends stay
    as captured."""
    first = captured["input"][0]
    part = first["content"][0]
    cut = {**first, "content": [{**part, "text": part["text"][:2000]}, *first["content"][1:]]}
    return {**captured, "input": [cut, *captured["input"][1:]]}


def test_codexs_request_streams_the_events_codex_reads(served):
    assert len(json.dumps(CAPTURED)) > 35_000 and CAPTURED["store"] is False
    body = {**_shortened(CAPTURED), "max_output_tokens": 12}
    events = _events(served, body)
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    final = events[-1]["response"]
    assert final["usage"]["input_tokens"] > 5_000
    for item in final["output"]:  # each item Codex builds its history from, done
        done = [e for e in events if e["type"] == "response.output_item.done"
                and e["item"]["id"] == item["id"]]
        assert len(done) == 1 and done[0]["item"]["type"] in ("message", "function_call")
    # Codex resends the whole conversation (store false): the prefix is warm.
    history = [*body["input"]] + [i for i in final["output"] if i["type"] == "message"] + [
        {"type": "message", "role": "user", "content": [{"type": "input_text",
                                                         "text": "And again?"}]}]
    again = _events(served, {**body, "input": history})[-1]["response"]
    assert again["usage"]["input_tokens_details"]["cached_tokens"] > 5_000


def test_a_default_codex_config_hears_how_to_turn_web_search_off(served):
    body = {**CAPTURED, "tools": CAPTURED["tools"] + [{"type": "web_search",
                                                      "external_web_access": False}]}
    response = httpx.post(f"{served.url}/v1/responses", json=body, timeout=60)
    assert response.status_code == 400
    assert 'web_search = "disabled"' in response.json()["error"]["message"]
