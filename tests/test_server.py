"""The OpenAI-compatible server on the real engine (tiny model), driven by the
real `openai` client against uvicorn on a free local port."""

import socket
import threading

import httpx
import openai
import pytest
import uvicorn

from engine import Finished
from server.api import ServerConfig, make_app
from tests.listening import listening_socket


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    def __init__(self, engine, **config):
        # The socket listens before the server's thread starts: a request
        # made at once waits in its backlog until the server accepts it.
        sock = listening_socket()
        self.port = sock.getsockname()[1]
        self.logged: list[str] = []  # the access log: a line once a request has ended
        self._logged = threading.Condition()
        self.server = uvicorn.Server(uvicorn.Config(
            make_app(engine, ServerConfig(**{"model_id": "tiny", **config}),
                     access_log=self._log), host="127.0.0.1",
            port=self.port, log_level="warning",
            # uvicorn closes a connection idle 5 s; a client (max_retries=0)
            # that took longer to build its next request on a loaded machine
            # then sent it on a closing socket: "Server disconnected".
            timeout_keep_alive=120))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]},
                                       daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.port}"
        self.clients: list[openai.OpenAI] = []
        self.engine = engine

    def _log(self, line: str) -> None:
        with self._logged:
            self.logged.append(line)
            self._logged.notify_all()

    def wait_logged(self, n: int, timeout: float = 30) -> bool:
        """Wait until `n` requests have ended on the server (slot given back)."""
        with self._logged:
            return self._logged.wait_for(lambda: len(self.logged) >= n, timeout)

    def client(self, key="none", **kw) -> openai.OpenAI:
        client = openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0, **kw)
        self.clients.append(client)  # closed at stop: no socket left to the collector
        return client

    def claude(self, key="x"):
        """The official anthropic client, closed at stop as `client`'s are."""
        import anthropic

        client = anthropic.Anthropic(base_url=self.url, api_key=key, max_retries=0)
        self.clients.append(client)
        return client

    def stop(self):
        for client in self.clients:
            client.close()
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def served(make_engine):
    engine = make_engine()
    s = Served(engine)
    yield s
    s.stop()


HELLO = [{"role": "user", "content": "hello world, how are you today?"}]


def test_chat_completion_and_streaming_agree(served):
    client = served.client()
    done = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=12,
                                          temperature=0)
    assert done.choices[0].message.role == "assistant"
    text = done.choices[0].message.content
    assert text and done.usage.completion_tokens <= 12
    assert done.choices[0].finish_reason in ("stop", "length")
    chunks = list(client.chat.completions.create(
        model="tiny", messages=HELLO, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text  # greedy: the same answer either way
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and
                c.choices[0].finish_reason]
    assert len(finishes) == 1
    assert chunks[-1].usage.completion_tokens == done.usage.completion_tokens


def test_completions_models_health_and_cached_tokens(served):
    client = served.client()
    assert [m.id for m in client.models.list()] == ["tiny"]
    assert httpx.get(served.url + "/health").json()["status"] == "ok"
    text = client.completions.create(model="tiny", prompt="the quick brown fox", max_tokens=6,
                                     temperature=0)
    assert text.choices[0].text is not None and text.usage.prompt_tokens > 0
    # A follow-up turn reuses the prefix cache, and usage says so.
    first = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=16,
                                           temperature=0)
    follow = HELLO + [{"role": "assistant", "content": first.choices[0].message.content},
                      {"role": "user", "content": "and again?"}]
    second = client.chat.completions.create(model="tiny", messages=follow, max_tokens=4,
                                            temperature=0)
    assert second.usage.prompt_tokens_details.cached_tokens > 0


def test_a_prompt_of_token_ids_is_the_same_prompt(served):
    """As OpenAI's API and vLLM take it (remote lanes send ids): the answer
    to the ids of a text is the answer to the text; an id outside the
    vocabulary is a 400 naming it, never a read past the embedding."""
    client = served.client()
    ids = list(served.engine.tokenizer.encode("the quick brown fox"))
    as_text = client.completions.create(model="tiny", prompt="the quick brown fox",
                                        max_tokens=8, temperature=0)
    as_ids = client.completions.create(model="tiny", prompt=ids, max_tokens=8, temperature=0)
    assert as_ids.choices[0].text == as_text.choices[0].text
    assert as_ids.usage.prompt_tokens == len(ids)
    for bad in ([ids[0], 10**9], [-1], [1.5], [True]):
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model="tiny", prompt=bad, max_tokens=2)
        assert "prompt" in str(e.value) or "vocabulary" in str(e.value)


def test_stop_strings_and_seeds(served):
    client = served.client()
    free = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=24,
                                          temperature=0).choices[0].message.content
    assert len(free) > 4
    cut = free[2:4]
    stopped = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=24,
                                             temperature=0, stop=[cut])
    assert cut not in stopped.choices[0].message.content
    assert stopped.choices[0].finish_reason == "stop"
    runs = [client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=16,
                                           temperature=1.0, seed=s).choices[0].message.content
            for s in (3, 3, 4)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_errors_use_openai_bodies_and_codes(served, make_engine):
    client = served.client()
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-9", messages=HELLO)
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="tiny", messages=HELLO, n=2)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="tiny", messages=HELLO, temperature=-1)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="tiny", messages=HELLO, presence_penalty=0.5)
    with pytest.raises(openai.BadRequestError) as e:  # OpenAI's 400 for a prompt too long
        client.chat.completions.create(model="tiny", messages=[
            {"role": "user", "content": " ".join(["river"] * 2000)}])
    assert e.value.status_code == 400 and e.value.code == "context_length_exceeded"
    assert e.value.param == "messages" and "context" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt=" ".join(["river"] * 2000))
    assert e.value.code == "context_length_exceeded" and e.value.param == "prompt"
    url = served.url + "/v1/chat/completions"
    assert httpx.post(url, content=b"{not json",
                      headers={"content-type": "application/json"}).status_code == 400
    huge = httpx.post(url, json={"model": "tiny", "messages": [
        {"role": "user", "content": "x" * (5 << 20)}]}, timeout=60)
    assert huge.status_code == 413 and "MiB" in huge.json()["error"]["message"]
    assert httpx.post(url, json={"model": "tiny", "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}
    ).status_code == 400
    keyed = Served(make_engine(), api_key="sekret")
    try:
        with pytest.raises(openai.AuthenticationError):
            keyed.client("wrong").models.list()
        assert [m.id for m in keyed.client("sekret").models.list()] == ["tiny"]
    finally:
        keyed.stop()


def test_a_client_that_disconnects_frees_its_slot(served):
    finished, ended = [], threading.Event()

    def on_event(event):
        if isinstance(event, Finished):
            finished.append(event)
            ended.set()

    served.engine.subscribe(on_event)
    with httpx.stream("POST", served.url + "/v1/chat/completions", json={
            "model": "tiny", "messages": HELLO, "max_tokens": 400, "stream": True,
            "temperature": 0}) as response:
        for _ in response.iter_lines():
            break  # read one event, then hang up
    assert ended.wait(10)
    assert finished[0].reason == "cancelled"
    assert finished[0].output_tokens < 400
    assert served.wait_logged(1)  # the stream has ended on the server, its slot given back
    assert httpx.get(served.url + "/health").json()["in_flight"] == 0


def test_32_concurrent_streams_each_finish_once(served):
    finished, all_in = [], threading.Event()

    def on_event(e):  # observers run on the engine's delivery thread, maybe after
        if isinstance(e, Finished):  # the client has read its last chunk
            finished.append(e.request_id)
            if len(finished) >= 32:
                all_in.set()

    served.engine.subscribe(on_event)
    results = [None] * 32

    def one(i):
        chunks = list(served.client().chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": f"count {i}"}],
            max_tokens=8, temperature=0, stream=True))
        results[i] = sum(1 for c in chunks if c.choices and c.choices[0].finish_reason)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == [1] * 32
    assert all_in.wait(10), finished
    assert len(set(finished)) == 32  # a request finished twice would leave one out


def test_a_full_queue_answers_429_with_retry_after(make_engine):
    from engine import Token

    engine = make_engine()
    gate = threading.Event()  # holds the first request at its first token
    reached = threading.Event()  # it has its slot: it was submitted and streams

    def hold(event):
        if isinstance(event, Token):
            reached.set()
            gate.wait(30)

    engine.subscribe(hold)
    s = Served(engine, max_in_flight=1)
    held = threading.Thread(target=lambda: httpx.post(
        s.url + "/v1/chat/completions", timeout=60,
        json={"model": "tiny", "messages": HELLO, "max_tokens": 5}))
    try:
        held.start()
        assert reached.wait(30)
        r = httpx.post(s.url + "/v1/chat/completions",
                       json={"model": "tiny", "messages": HELLO, "max_tokens": 2})
        assert r.status_code == 429 and r.headers["Retry-After"] == "1"
        assert r.json()["error"]["type"] == "rate_limit_error"
        gate.set()
        held.join(30)
        again = httpx.post(s.url + "/v1/chat/completions", timeout=60,
                           json={"model": "tiny", "messages": HELLO, "max_tokens": 2})
        assert again.status_code == 200  # the slot is free again
    finally:
        gate.set()
        s.stop()


def test_tandem_serve_from_the_command_line(tiny_model_dir):
    import os
    import subprocess
    import sys

    env = dict(os.environ, HF_HUB_OFFLINE="1")
    refused = subprocess.run([sys.executable, "-m", "app", "serve", "--host", "0.0.0.0"],
                             capture_output=True, text=True, env=env, timeout=60)
    assert refused.returncode == 2 and "--api-key" in refused.stderr
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--model",
                             str(tiny_model_dir), "--port", "0", "--alias", "claude-*=default"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # It says where it listens once it listens (--port 0: the port it got).
        first = proc.stdout.readline()
        assert "at http://127.0.0.1:" in first, first + proc.stderr.read()
        assert "'claude-*' (an alias)" in first
        port = int(first.split("at http://127.0.0.1:")[1].split("/")[0])
        with openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x",
                           max_retries=0) as client:
            model = client.models.list().data[0].id
            done = client.chat.completions.create(model=model, messages=HELLO, max_tokens=4)
        assert done.usage.completion_tokens >= 1
        import anthropic  # Claude Code's default model id, through the alias

        with anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="x",
                                 max_retries=0) as claude:
            assert claude.messages.create(model="claude-opus-4-8", max_tokens=4,
                                          messages=HELLO).usage.output_tokens >= 1
    finally:
        proc.terminate()
        stdout, stderr = proc.communicate(timeout=30)
        stdout = first + stdout
    assert "Traceback" not in stderr
    # It says where it listens, one line per request, and that it stopped.
    assert f"at http://127.0.0.1:{port}/v1" in stdout and f"'{tiny_model_dir.name}'" in stdout
    assert any(line.startswith("POST /v1/chat/completions 200 · ") and "tokens" in line
               for line in stdout.splitlines()), stdout
    assert "GET /v1/models 200" in stdout and stdout.rstrip().endswith("Tandem serve stopped.")


WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 10},
        "unit": {"enum": ["C", "F"]}},
        "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_time", "parameters": {"type": "object", "properties": {
            "zone": {"type": "string", "maxLength": 6}}, "required": ["zone"],
            "additionalProperties": False}}}]
