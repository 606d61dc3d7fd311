"""The MCP host and the tool loop (issue 36) against real MCP servers
written with the SDK (tests/mcp_servers.py; stdio and Streamable HTTP):
tools listed and called; each fault a note or an error result, never a
crash or a hang (a server that cannot start, hangs, crashes mid-call,
answers garbage, returns 50 MB, lists 500 tools); the config format; and
the round trip through the engine with a tiny Qwen2.5-format tool model
(forced to call on the first round), approval and denial, and `tandem
generate --mcp` printing the call and its result."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from toolhost import loop
from toolhost.config import ConfigError, ServerSpec, parse
from toolhost.host import MAX_RESULT_CHARS, MAX_TOOLS, ToolHost

SERVERS = str(Path(__file__).parent / "mcp_servers.py")


def stdio(name="weather", kind="weather") -> ServerSpec:
    return ServerSpec(name, command=sys.executable, args=(SERVERS, "stdio", kind))


@pytest.fixture(scope="module")
def http_server():
    from tests.mcp_servers import http_server as started

    with started() as url:
        yield url


def test_the_config_format_and_its_refusals():
    specs = parse(json.dumps({"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "server"], "env": {"ROOT": "/tmp"}},
        "notes": {"url": "https://example.org/mcp", "headers": {"Authorization": "Bearer x"}}}}))
    assert [(s.name, s.kind) for s in specs] == [("files", "stdio"), ("notes", "http")]
    assert specs[0].env == {"ROOT": "/tmp"} and specs[1].headers["Authorization"] == "Bearer x"
    for bad, said in ((["x"], "mcpServers"), ({"a b": {"command": "x"}}, "letters"),
                      ({"x": {"command": "c", "url": "https://h/"}}, "either"),
                      ({"x": {"url": "http://192.0.2.1/mcp"}}, "plain http"),
                      ({"x": {"command": "c", "args": [1]}}, "args")):
        with pytest.raises(ConfigError, match=said):
            parse(json.dumps(bad))
    with pytest.raises(ConfigError, match="JSON"):
        parse("{not json")


def test_stdio_and_http_servers_list_and_call_tools(http_server, tmp_path):
    host = ToolHost([stdio(), ServerSpec("remote", url=http_server)], log_dir=tmp_path)
    try:
        tools = host.tools()
        assert {(t.server, t.name) for t in tools} >= {("weather", "get_weather"),
                                                       ("remote", "get_weather")}
        assert host.call("weather", "get_weather", {"city": "Paris"}).text == "sunny in Paris"
        assert host.call("remote", "get_weather", {"city": "Oslo"}).text == "sunny in Oslo"
        big = host.call("weather", "huge", {"mib": 2})
        assert len(big.text) < MAX_RESULT_CHARS + 100 and "cut by Tandem" in big.text
        # 50 MB in one stdio message: never read whole; the call ends with an
        # error saying so (not its time limit's) and the server goes on.
        huge = host.call("weather", "huge", {"mib": 50})
        assert huge.is_error and "over 8 MiB; Tandem did not read it" in huge.text
        assert host.call("weather", "get_weather", {"city": "Oslo"}).text == "sunny in Oslo"
    finally:
        host.close()


@pytest.mark.parametrize("line, answered", [
    (b'{"jsonrpc": "2.0", "id": 7, "result": {"x": "' + b"y" * 5000 + b'"}}', b'"id": 7'),
    (b'{"result": {"x": "' + b"y" * 5000 + b'"}, "jsonrpc": "2.0", "id": "a-1"}', b'"id": "a-1"'),
    (b'{"jsonrpc": "2.0", "method": "notifications/message", "params": {"x": "'
     + b"y" * 5000 + b'"}}', None),
])
def test_a_stdio_line_over_the_limit_is_dropped_and_answered(line, answered):
    """toolhost/stdio_bound.py: lines pass whole; one over the limit is
    replaced by an error response for its id (wherever the id is), or
    dropped when it is not a response."""
    import anyio

    from toolhost.stdio_bound import BoundedLines

    async def read_all() -> list[bytes]:
        send, receive = anyio.create_memory_object_stream(100)
        data = b'{"a": 1}\n' + line + b'\n{"b": 2}\n'
        for start in range(0, len(data), 1000):  # in chunks, as a pipe gives them
            await send.send(data[start:start + 1000])
        await send.aclose()

        class Bytes(anyio.abc.ByteReceiveStream):
            async def receive(self, max_bytes=65536):
                return await receive.receive()

            async def aclose(self):
                await receive.aclose()

        bounded, out = BoundedLines(Bytes(), limit=4096), []
        while True:
            try:
                out.append(await bounded.receive())
            except anyio.EndOfStream:
                await bounded.aclose()
                return out

    out = anyio.run(read_all)
    assert out[0] == b'{"a": 1}\n' and out[-1] == b'{"b": 2}\n'
    if answered is None:
        assert len(out) == 2
    else:
        assert len(out) == 3 and answered in out[1] and b"Tandem did not read it" in out[1]
        assert json.loads(out[1])["error"]["message"].startswith("The tool server sent")


def test_faults_are_notes_and_error_results(tmp_path):
    mute = ServerSpec("mute", command=sys.executable,  # never answers; leaves with its stdin
                      args=("-c", "import sys; sys.stdin.buffer.read()"))
    # Its start deadline is waited for whole: short, on a host of its own; the
    # servers that do start get all the time a busy machine needs (the SDK's
    # import, 500 tools: seconds under the suite's other workers).
    with_mute = ToolHost([mute], log_dir=tmp_path, start_s=0.5)
    try:
        assert with_mute.tools() == [] and with_mute.notes["mute"] == "did not start within 0.5 s"
    finally:
        with_mute.close()
    # Closing waited for the given-up start to end: its process gone, its log
    # whole (it was left to the loop thread's end, the log waited for 5 s).
    assert all(log.wait(0) for log in with_mute._logs) and with_mute._logs
    host = ToolHost([stdio(), ServerSpec("missing", command=str(tmp_path / "nothing")),
                     stdio("many", "many"), stdio("garbage", "garbage")],
                    log_dir=tmp_path, start_s=60)
    try:
        tools = host.tools()
        assert "missing" in host.notes and "No such file" in host.notes["missing"]
        assert len([t for t in tools if t.server == "many"]) == MAX_TOOLS
        assert "500 tools" in host.notes["many"]
        host.call_s = 0.5  # the limit this call checks, waited for whole: short, for it alone
        slow = host.call("weather", "slow", {})
        assert slow.is_error and "did not answer within 0.5 s" in slow.text
        host.call_s = 60
        assert host.call("weather", "get_weather", {"city": "Rome"}).text == "sunny in Rome"
        crashed = host.call("weather", "crash", {})
        assert crashed.is_error
        assert host.notes["weather"].startswith("stopped")  # said, not raised
        # The next call starts it again.
        assert host.call("weather", "get_weather", {"city": "Rome"}).text == "sunny in Rome"
        assert "weather" not in host.notes
        assert host.call("missing", "x", {}).is_error
    finally:
        host.close()


@pytest.fixture(scope="module")
def tool_engine(tmp_path_factory):
    from engine import Engine, LaneSpec, load_model
    from tests.tool_models import QWEN25_TOOLS, build_tool_model

    path = build_tool_model(tmp_path_factory.mktemp("mcp") / "qwen25", QWEN25_TOOLS)
    engine = Engine(load_model(str(path)), lanes=[LaneSpec("cpu", "cpu", "float32")])
    assert engine.wait_ready(120)
    yield engine, path
    engine.close()


def test_the_loop_calls_an_approved_tool_and_goes_on_warm(tool_engine, tmp_path):
    from engine import SamplingParams

    engine, _ = tool_engine
    host = ToolHost([stdio()], log_dir=tmp_path)
    try:
        tools = [t for t in host.tools() if t.name == "get_weather"]
        asked = []
        outcome = loop.run(engine, [{"role": "user", "content": "Weather in Paris?"}], host,
                           tools, lambda call: asked.append(call) or True,
                           SamplingParams(max_tokens=48, temperature=0.0),
                           choice="get_weather", rounds=1)
        assert asked and outcome.calls[0].approved
        assert outcome.calls[0].result.text.startswith("sunny in ")
        roles = [m["role"] for m in outcome.messages]
        assert roles[:4] == ["user", "assistant", "tool", "assistant"]
        assert outcome.messages[2]["content"] == outcome.calls[0].result.text
        # The round after the result starts with the previous prompt: warm.
        assert outcome.finished.cached_tokens > 16
        # Each round's answer is kept (the CLI's stats line adds them up).
        assert len(outcome.answers) == 2 and outcome.answers[-1] is outcome.finished
        denied = loop.run(engine, [{"role": "user", "content": "Weather in Oslo?"}], host,
                          tools, lambda call: False,
                          SamplingParams(max_tokens=48, temperature=0.0),
                          choice="get_weather", rounds=1)
        assert not denied.calls[0].approved and "did not allow" in denied.messages[2]["content"]
    finally:
        host.close()


def test_tandem_generate_mcp_prints_the_call_and_its_result(tool_engine, tmp_path, capsys):
    from app import cli

    _, path = tool_engine
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"weather": {
        "command": sys.executable, "args": [SERVERS, "stdio"]}}}))
    assert cli.main(["generate", "--model", str(path), "--no-kv-cache", "--mcp", str(config),
                     "--force-tool", "get_weather", "--allow-tools", "get_weather",
                     "--tool-rounds", "1", "--max-tokens", "80", "Weather in Paris?"]) == 0
    err = capsys.readouterr().err
    assert "→ weather/get_weather(" in err and "← result: sunny in " in err
    # The stats line, as without --mcp: its two rounds added up.
    stats = err.strip().splitlines()[-1]
    assert re.fullmatch(r"(finished|stopped: length); 2 rounds, 1 tool call; prompt \d+ tokens "
                        r"\(\d+ cached\), output \d+ tokens, TTFT \d+ ms, .* tokens/s, total "
                        r"[\d.]+ s; prefill cpu -> decode cpu.*", stats), stats
    # Not allowed, and no terminal to ask: refused, and the model is told.
    assert cli.main(["generate", "--model", str(path), "--no-kv-cache", "--mcp", str(config),
                     "--force-tool", "get_weather", "--tool-rounds", "1", "--max-tokens", "80",
                     "Weather in Paris?"]) == 0
    err = capsys.readouterr().err
    assert "not allowed (no terminal to ask" in err and "← error: The user did not allow" in err

    # A tool server's text reaches the terminal escaped, never as escape sequences.
    assert cli.main(["generate", "--model", str(path), "--no-kv-cache", "--mcp", str(config),
                     "--force-tool", "ansi", "--allow-tools", "ansi", "--tool-rounds", "1",
                     "--max-tokens", "40", "Clear the screen"]) == 0
    err = capsys.readouterr().err
    assert "\\x1b[2J\\x1b]0;pwned\\x07cleared" in err and "\x1b" not in err


def test_a_call_of_an_invented_tool_or_with_bad_arguments_is_an_error_result():
    """Checked before anyone is asked: what the model sees (and the user)."""
    from toolhost.host import Tool

    tools = {"get_weather": Tool("weather", "get_weather", "", {
        "type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}},
        "required": ["city"]})}
    invented = loop.check(loop.Call("c1", "launch_rockets", {}), tools)
    assert invented.is_error and "no tool named 'launch_rockets'" in invented.text
    assert "get_weather" in invented.text
    bad = loop.Call("c2", "get_weather", {"city": "Atlantis"})
    said = loop.check(bad, tools)
    assert said.is_error and "do not fit get_weather's schema" in said.text
    assert bad.server == "weather"
    unread = loop.check(loop.Call("c3", "?", {"_raw": "{"}), tools)
    assert unread.is_error and "could not be read" in unread.text
    assert loop.check(loop.Call("c4", "get_weather", {"city": "Oslo"}), tools) is None


def test_tandem_generate_mcp_calls_an_http_server(tool_engine, http_server, tmp_path, capsys):
    from app import cli

    _, path = tool_engine
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"remote": {"url": http_server}}}))
    assert cli.main(["generate", "--model", str(path), "--no-kv-cache", "--mcp", str(config),
                     "--force-tool", "get_weather", "--allow-tools", "get_weather",
                     "--tool-rounds", "1", "--max-tokens", "80", "Weather in Oslo?"]) == 0
    err = capsys.readouterr().err
    assert "→ remote/get_weather(" in err and "← result: sunny in " in err


def test_odd_arguments_and_broken_schemas_never_break_the_loop():
    """A parser that reads Python literals (sets, bytes) gives arguments JSON
    cannot carry: made JSON values. A server's broken schema (a bad $ref):
    the server judges the call."""
    from toolhost.host import Tool

    plain = loop._plain({"x": {1, 2}, "b": b"\x00", "n": 1})
    assert json.loads(json.dumps(plain)) == plain and plain["n"] == 1
    broken = {"get": Tool("s", "get", "", {"type": "object",
                                           "properties": {"x": {"$ref": "#/nowhere"}}})}
    assert loop.check(loop.Call("c", "get", {"x": 1}), broken) is None


def test_the_stats_of_a_tool_loop_add_its_rounds_up():
    from app.ui.answer_stats import stats_line, summed
    from engine import Finished

    first = Finished("r1", None, "stop", "", prompt_tokens=100, cached_tokens=0,
                     output_tokens=11, ttft_s=0.5, time_per_output_token_s=0.01, e2e_s=0.6,
                     lanes=(("prefill", "cpu"), ("decode", "cpu")), drafted=4,
                     accepted_drafts=2)
    second = Finished("r2", None, "length", "", prompt_tokens=150, cached_tokens=100,
                      output_tokens=21, ttft_s=0.1, time_per_output_token_s=0.02, e2e_s=0.5,
                      lanes=(("prefill", "cpu"), ("decode", "gpu")))
    both = summed([first, second])
    assert (both.prompt_tokens, both.cached_tokens, both.output_tokens) == (250, 100, 32)
    assert both.ttft_s == 0.5 and both.reason == "length" and both.e2e_s == pytest.approx(1.1)
    # tokens/s over every round's decoding: 30 steps in 0.1 + 0.4 s
    assert both.tokens_per_s == pytest.approx(60.0)
    assert stats_line(both, "2 rounds, 1 tool call") == (
        "stopped: length; 2 rounds, 1 tool call; prompt 250 tokens (100 cached), output 32 "
        "tokens, TTFT 500 ms, 60.0 tokens/s, total 1.10 s; prefill cpu -> decode cpu -> "
        "decode gpu; drafts 2/4 accepted")


def test_list_tools_says_what_would_be_offered_without_loading_the_weights(tool_engine,
                                                                           tmp_path, capsys):
    """Each tool: its server, the name offered, allowed or asks, whether it
    fits (the template's refusal said), its description's first line; the
    model's weights never read (here they could not be)."""
    from app import cli

    _, path = tool_engine
    broken = tmp_path / "broken"
    shutil.copytree(path, broken)
    (broken / "model.safetensors").write_bytes(b"not weights")
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "sun": {"command": sys.executable, "args": [SERVERS, "stdio", "sun"]},
        "rain": {"command": sys.executable, "args": [SERVERS, "stdio", "rain"]},
        "weather": {"command": sys.executable, "args": [SERVERS, "stdio", "spelled"]}}}))
    assert cli.main(["generate", "--model", str(broken), "--mcp", str(config), "--list-tools",
                     "--allow-tools", "sun/get_weather,pid"]) == 0
    captured = capsys.readouterr()
    rows = {line.split()[0]: line for line in captured.out.splitlines()}
    assert rows["TOOL"].split() == ["TOOL", "RUNS", "FITS", "DESCRIPTION"]
    sun = rows["sun/get_weather"]
    assert re.search(r"\(as sun_get_weather\) +allowed +yes, \d+ tokens +The weather in a "
                     r"city\.$", sun), sun
    assert re.search(r"\(as rain_get_weather\) +asks +yes, ", rows["rain/get_weather"])
    assert re.search(r" allowed +(yes|no), ", rows["weather/pid"])
    assert "no: A tool definition or call contains '<|im_start|>'" in rows["weather/spelled"]
    over = [line for line in rows.values() if "over the budget" in line]
    assert over and all(" no, " in line for line in over)  # 4,096 tokens: not all fit
    assert re.search(r"tandem: \d+ of \d+ tools fit: [\d,]+ tokens of the 2,048 the tools "
                     r"may take \(50% of the model's 4,096-token context\)", captured.err)
    assert "Traceback" not in captured.err and "corrupt" not in captured.err
