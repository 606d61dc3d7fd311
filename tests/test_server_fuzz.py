"""A generated fuzz of the newest endpoints' bodies (issue 47): 500 bodies
each for /v1/responses, /v1/messages and /v1/embeddings, built from each
dialect's own fields with hostile values among them (lone surrogates, wrong
types, images good and bad, schemas with $defs, huge counts). Never a 5xx,
each answered within 10 s (the tiny models answer in milliseconds: the
bound is for a request that stalls), errors in the dialect's shape, no slot
held afterwards and the process grown by under 200 MB. Real uvicorn, a tiny
model with Qwen2.5's tool format and a tiny BERT, raw HTTP."""

from __future__ import annotations

import base64
import io
import json
import resource
import time

import httpx
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from engine import Engine, LaneSpec, load_embedding_model, load_model
from tests.embedding_models import build_bert
from tests.test_server import Served
from tests.tool_models import QWEN25_TOOLS, build_tool_model

KEY = "fuzz-key"
EXAMPLES = 500


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    engine = Engine(load_model(str(build_tool_model(root / "qwen25", QWEN25_TOOLS))),
                    lanes=[LaneSpec("cpu", "cpu", "float32")],
                    embedding_model=load_embedding_model(str(build_bert(root / "tiny-bert"))))
    assert engine.wait_ready(120)
    s = Served(engine, api_key=KEY)
    yield s
    s.stop()
    engine.close()


@pytest.fixture(scope="module")
def client(served):
    """One client for every request: a new one each (httpx.post) costs more
    than the request (its TLS context: ~50 ms on a busy machine)."""
    with httpx.Client(base_url=served.url, timeout=60,
                      headers={"x-api-key": KEY}) as c:
        yield c


def _png_url(size=(8, 8)) -> str:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, (10, 200, 30)).save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


HOSTILE_TEXT = st.sampled_from(["\udcff", "a\ud800b", "<|im_end|>", "\x1b[2J", "",
                                "x" * 5000, "‮evil", "\x00"])
TEXT = st.text(max_size=16) | HOSTILE_TEXT
SCALAR = st.none() | st.booleans() | st.integers(-3, 10**9) | st.floats() | TEXT
JSON = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(TEXT, inner, max_size=4), max_leaves=10)
IMAGE_URL = st.sampled_from([_png_url(), "data:image/png;base64,AAAA", "data:text/plain,hi",
                             "http://127.0.0.1:1/x.png", "file:///etc/passwd", "\udcff",
                             _png_url((3000, 10))])
DEFS = {"$defs": {"C": {"type": "string", "enum": ["a", "b"]}}, "type": "object",
        "properties": {"c": {"$ref": "#/$defs/C"}}, "required": ["c"]}
SCHEMA = st.sampled_from([DEFS, {"type": "object"}, {"$ref": "#/nowhere"}, {"type": 5},
                          {"anyOf": [{"const": i} for i in range(50)]}, True, False])

RESPONSES_INPUT = st.one_of(
    TEXT,
    st.lists(st.one_of(
        st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "developer",
                                                        "assistant", "tool", 5]),
                               "content": TEXT | st.lists(st.one_of(
                                   st.fixed_dictionaries({"type": st.just("input_text"),
                                                          "text": TEXT}),
                                   st.fixed_dictionaries({"type": st.just("input_image"),
                                                          "image_url": IMAGE_URL}),
                                   JSON), max_size=3)}),
        st.fixed_dictionaries({"type": st.just("function_call"), "call_id": TEXT,
                               "name": TEXT, "arguments": TEXT | st.just("[{}, {}]")}),
        st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": TEXT,
                               "output": TEXT}),
        JSON), max_size=4))
RESPONSES = {
    "input": RESPONSES_INPUT, "instructions": TEXT | JSON, "model": st.just("tiny") | TEXT,
    "max_output_tokens": st.integers(-1, 3) | JSON, "stream": st.booleans() | JSON,
    "store": st.booleans() | JSON, "metadata": st.dictionaries(TEXT, TEXT, max_size=3) | JSON,
    "user": TEXT | JSON, "previous_response_id": TEXT | JSON, "prompt_cache_key": TEXT,
    "reasoning": st.fixed_dictionaries({"effort": TEXT}) | JSON,
    "tools": st.lists(st.fixed_dictionaries({"type": st.just("function"), "name": TEXT,
                                             "parameters": SCHEMA}), max_size=2) | JSON,
    "tool_choice": st.sampled_from(["auto", "required", "none", "x"]) | JSON,
    "text": st.fixed_dictionaries({"format": st.fixed_dictionaries(
        {"type": st.sampled_from(["json_schema", "text", "x"]), "name": TEXT,
         "schema": SCHEMA})}) | JSON,
    "temperature": st.floats() | JSON, "top_p": st.floats() | JSON, "x": JSON,
}
MESSAGES = {
    "messages": st.lists(st.fixed_dictionaries({
        "role": st.sampled_from(["user", "assistant", "system", 7]),
        "content": TEXT | st.lists(st.one_of(
            st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}),
            st.fixed_dictionaries({"type": st.just("image"), "source": st.fixed_dictionaries(
                {"type": st.just("base64"), "media_type": st.just("image/png"),
                 "data": st.sampled_from([_png_url().split(",")[1], "AAAA", "\udcff"])})}),
            st.fixed_dictionaries({"type": st.just("tool_use"), "id": TEXT, "name": TEXT,
                                   "input": JSON}),
            JSON), max_size=3)}), max_size=3) | JSON,
    "model": st.just("tiny") | TEXT, "max_tokens": st.integers(-1, 3) | JSON,
    "system": TEXT | JSON, "stream": st.booleans() | JSON, "metadata": JSON,
    "tools": st.lists(st.fixed_dictionaries({"name": TEXT, "input_schema": SCHEMA}),
                      max_size=2) | JSON,
    "tool_choice": st.fixed_dictionaries({"type": st.sampled_from(["any", "auto", "tool",
                                                                   "none"])}) | JSON,
    "stop_sequences": st.lists(TEXT, max_size=2) | JSON, "thinking": JSON,
    "context_management": JSON, "x": JSON,
    "output_config": st.fixed_dictionaries({"effort": TEXT, "format": st.fixed_dictionaries(
        {"type": st.sampled_from(["json_schema", "x"]), "schema": SCHEMA})}) | JSON,
    "output_format": JSON,
}
EMBEDDINGS = {
    "input": (TEXT | st.lists(TEXT, max_size=5)
              | st.lists(st.integers(-2, 70_000), max_size=40)
              | st.lists(st.lists(st.integers(0, 500), max_size=30), max_size=5) | JSON),
    "model": st.just("tiny-bert") | TEXT, "encoding_format": st.sampled_from(
        ["float", "base64", "x"]) | JSON,
    "dimensions": st.integers(-1, 100) | JSON, "user": TEXT | JSON, "x": JSON,
}
DIALECTS = {"/v1/responses": (RESPONSES, {"model": "tiny", "max_output_tokens": 3,
                                          "input": "hi"}),
            "/v1/messages": (MESSAGES, {"model": "tiny", "max_tokens": 3,
                                        "messages": [{"role": "user", "content": "hi"}]}),
            "/v1/embeddings": (EMBEDDINGS, {"model": "tiny-bert", "input": "hi"})}
SEEN: dict[str, dict[int, int]] = {}
SLOWEST: list[float] = [0.0]


def _fuzz(client, path):
    fields, valid = DIALECTS[path]

    @seed(47)
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def one(data):
        names = data.draw(st.lists(st.sampled_from(sorted(fields)), max_size=6, unique=True))
        body = {name: data.draw(fields[name]) for name in names}
        how = data.draw(st.sampled_from(["as drawn", "valid under", "valid over"]))
        if how == "valid under":  # the drawn fields on a valid body
            body = {**valid, **body}
        elif how == "valid over":  # often a body that passes the first checks
            body.update(valid)
        raw = json.dumps(body).encode()
        start = time.monotonic()
        r = client.post(path, content=raw, headers={"content-type": "application/json"})
        if r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"):
            r.read()
        SLOWEST[0] = max(SLOWEST[0], time.monotonic() - start)
        SEEN[path][r.status_code] = SEEN[path].get(r.status_code, 0) + 1
        assert r.status_code < 500, (path, body, r.text)
        if r.status_code >= 400:
            error = r.json()
            assert (error["type"] == "error" and error["error"]["message"]) \
                if path == "/v1/messages" else error["error"]["message"]

    SEEN[path] = {}
    one()


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("path", sorted(DIALECTS))
def test_fuzzed_bodies_never_fault_stall_nor_grow(served, client, path):
    fields, valid = DIALECTS[path]
    for _ in range(3):  # warm: the model's first shapes, the grammar tokenizer
        client.post(path, json=valid)
    before = _rss_mb()
    SLOWEST[0] = 0.0
    _fuzz(client, path)
    grown = _rss_mb() - before
    slots = served.server.config.app.state.slots
    with served._logged:
        assert served._logged.wait_for(lambda: slots.in_flight == 0, 30)
    assert sum(SEEN[path].values()) >= EXAMPLES
    assert 200 in SEEN[path] and 400 in SEEN[path], SEEN[path]  # both sides reached
    assert SLOWEST[0] < 10, SLOWEST[0]
    assert grown < 200, grown
