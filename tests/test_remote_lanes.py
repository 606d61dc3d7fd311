"""Remote lanes for real: a second `tandem serve` process on 127.0.0.1 is the
remote, a fault-injecting proxy (tests/fault_proxy.py) stands in front of it.

Both sides serve a scripted model (tests/scripted_model.py: real forward
passes, crafted weights that make it say one known text), so "nothing the
user saw is lost or repeated" is checked exactly: whatever the remote did,
the answer is the script, once. The local lane is paced (a step lasts at
least 50 ms) and its cost model says so, so that the router prefers the
remote while it is up; each test checks the router's choice against its
predictions.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.fault_proxy import FaultProxy
from tests.scripted_model import build_scripted_model
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "the quick brown fox jumps over a lazy dog, how are you today? I am fine."
SLOW_STEP_S = 0.1  # 10 tokens/s here; the remote streams the tiny model ~4x faster


@pytest.fixture(scope="module")
def scripted_dir(tmp_path_factory):
    return build_scripted_model(tmp_path_factory.mktemp("remote") / "scripted", SCRIPT)


@contextlib.contextmanager
def serving(model_dir: Path, *options: str):
    """`tandem serve` on a free port; yields its base URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--model", str(model_dir), "--port", "0",
         *options], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    found: dict[str, str] = {}
    ready = threading.Event()

    def read():  # the URL, then drain its output so that it never blocks
        for line in proc.stdout:
            match = re.search(r"at (http://\S+)/v1", line)
            if match and not ready.is_set():
                found["url"] = match.group(1)
                ready.set()
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(120) and "url" in found, "tandem serve did not start"
        yield found["url"]
    finally:
        proc.terminate()
        proc.wait(30)
        reader.join(10)
        proc.stdout.close()


@pytest.fixture(scope="module")
def remote_server(scripted_dir):
    with serving(scripted_dir) as url:
        yield url


@pytest.fixture
def proxy(remote_server):
    p = FaultProxy(remote_server).start()
    yield p
    p.close()


@pytest.fixture
def engine_with_remote(scripted_dir, proxy):
    """A local engine (one paced CPU lane, its cost model saying so) with the
    proxied remote; returns (engine, events)."""
    from engine import Engine, LaneConfig, LaneSpec, RemoteSpec, load_model
    from engine.core.costmodel import CostModel

    made = []

    def make(**spec_options):
        spec = RemoteSpec(f"{proxy.url}/v1", "", **{"stall_s": 2.0, **spec_options})
        e = Engine(load_model(str(scripted_dir)),
                   lanes=[LaneSpec("cpu", "cpu", config=LaneConfig(min_step_s=SLOW_STEP_S))],
                   remotes=[spec])
        made.append(e)
        events = []
        e.subscribe(events.append)
        assert e.wait_ready(120, every_lane=True)
        remote = e.remotes.lanes["remote"]
        _wait(lambda: not remote.warming_up and e.lanes["cpu"].cost is not None)
        e.lanes["cpu"].scheduler.cost = CostModel(prefill_tps=2_000,
                                                  decode_points=[(0, 1 / SLOW_STEP_S)])
        return e, events

    yield make
    for e in made:
        e.close()


def _wait(condition, timeout=60.0):
    assert wait_until(condition, timeout), "condition not met in time"


def _ask(engine, tab="tab1", text="hi", max_tokens=64):
    from engine import SamplingParams

    return engine.submit([{"role": "user", "content": text}],
                         SamplingParams(max_tokens=max_tokens), tab_id=tab)


def _routed(events, request_id):
    from engine import Routed

    return [e for e in events if isinstance(e, Routed) and e.request_id == request_id]


def _shown(events, request_id):
    from engine import Token

    return "".join(e.text for e in events if isinstance(e, Token) and e.request_id == request_id)


def test_a_faster_remote_answers_whole_requests(engine_with_remote):
    engine, events = engine_with_remote()
    assert engine.mode == "hybrid"  # one CPU lane and a remote
    handle = _ask(engine)
    done = handle.result(60)
    assert done.reason == "stop" and done.text == SCRIPT
    assert done.lanes == (("prefill", "remote"), ("decode", "remote"))
    first = _routed(events, handle.request_id)[0]
    assert first.lane == "remote"
    # The router's choice is the one its predictions favour.
    assert first.predicted_s["remote"] < first.predicted_s["cpu"]
    assert first.predicted_done_s == pytest.approx(first.predicted_s["remote"])
    assert _shown(events, handle.request_id) == SCRIPT
    assert done.output_tokens >= 19


def test_a_conversation_sticks_to_the_remote_that_holds_it(engine_with_remote):
    engine, events = engine_with_remote()
    first = _ask(engine, tab="chat").result(60)
    follow = engine.submit([{"role": "user", "content": "hi"},
                            {"role": "assistant", "content": first.text},
                            {"role": "user", "content": "and then?"}],
                           tab_id="chat")
    follow.result(60)
    routed = _routed(events, follow.request_id)[0]
    assert routed.lane == "remote"
    assert "REMOTE holds" in routed.reason
    other = _ask(engine, tab="elsewhere")
    other.result(60)
    assert "holds" not in _routed(events, other.request_id)[0].reason


@pytest.mark.parametrize("mode,options,why", [
    ("cut", {"after_events": 6}, "ended before the answer"),
    ("garbage", {"after_events": 5}, "not JSON"),
    ("stall", {"after_events": 4}, "silent"),
    ("status", {"code": 500}, "HTTP 500"),
])
def test_a_remote_failing_mid_answer_hands_it_to_a_local_lane(engine_with_remote, proxy,
                                                              mode, options, why):
    # The silence a stall is told by is waited for whole: short where it is
    # the fault (stall_s counts from the last text: it never fires before it).
    engine, events = engine_with_remote(**({"stall_s": 0.5} if mode == "stall" else {}))
    proxy.set(mode, times=1, **options)
    handle = _ask(engine)
    done = handle.result(60)
    # Nothing shown is lost or repeated: the answer is the script, once.
    assert done.reason == "stop" and done.text == SCRIPT
    assert _shown(events, handle.request_id) == SCRIPT
    assert done.lanes[0] == ("prefill", "remote") and done.lanes[-1] == ("decode", "cpu")
    routed = _routed(events, handle.request_id)
    assert [r.lane for r in routed][:2] == ["remote", "cpu"]
    assert why in routed[1].reason
    assert ("goes on here from the" in routed[1].reason) == (mode != "status")
    assert done.output_tokens >= 19
    remote = engine.remotes.lanes["remote"]
    assert remote.phase in ("down", "retrying")
    # While it is down, new requests stay local and the dock says why.
    assert "down" in engine.describe_lanes()["remote"] or remote.phase == "retrying"


def test_a_busy_remote_gives_the_request_back_and_lowers_its_capacity(engine_with_remote,
                                                                     proxy):
    engine, events = engine_with_remote()
    remote = engine.remotes.lanes["remote"]
    proxy.set("status", code=429, retry_after=1, times=1)
    handle = _ask(engine)
    done = handle.result(60)
    assert done.text == SCRIPT and done.lanes[-1] == ("decode", "cpu")
    assert "refused it" in _routed(events, handle.request_id)[1].reason
    assert remote.scheduler.capacity == 1


def test_an_unreachable_remote_is_routed_around(engine_with_remote, proxy):
    proxy.set("refuse")
    engine, events = engine_with_remote()
    remote = engine.remotes.lanes["remote"]
    assert remote.phase in ("down", "retrying")  # its 2 s back-off may have passed
    done = _ask(engine).result(60)
    # Down: it goes local; half-open: it is the trial, refused, and goes local.
    assert done.text == SCRIPT and done.lanes[-1] == ("decode", "cpu")


def test_cancel_mid_stream_on_a_remote(engine_with_remote, proxy):
    from engine import Token

    engine, events = engine_with_remote()
    proxy.set("stall", after_events=3, times=1)
    handle = _ask(engine)
    _wait(lambda: any(isinstance(e, Token) and e.request_id == handle.request_id
                      for e in events))
    handle.cancel()
    done = handle.result(30)
    assert done.reason == "cancelled"
    assert engine.remotes.lanes["remote"].phase == "serving"  # a cancel is not a fault


def test_a_wrong_key_turns_the_remote_off_and_never_shows_the_key(scripted_dir, tmp_path):
    from engine import Engine, LaneSpec, RemoteSpec, load_model

    secret = "wrong-key-s3cret"
    with serving(scripted_dir, "--api-key", "right-key") as url:
        e = Engine(load_model(str(scripted_dir)), lanes=[LaneSpec("cpu", "cpu")],
                   remotes=[(RemoteSpec(f"{url}/v1"), secret)])
        try:
            remote = e.remotes.lanes["remote"]
            _wait(lambda: not remote.warming_up)
            assert remote.phase == "failed" and "HTTP 401" in remote.failed
            assert secret not in remote.failed and secret not in str(e.describe_lanes())
            assert _ask(e).result(60).lanes[0] == ("prefill", "cpu")
        finally:
            e.close()


def test_the_command_line_routes_to_a_remote(scripted_dir, remote_server, capsys):
    from app import cli

    assert cli.main(["generate", "--model", str(scripted_dir), "--remote",
                     f"{remote_server}/v1", "--max-tokens", "64", "hi"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == SCRIPT and "finished;" in err
    # Plain http to another machine is refused before anything loads.
    assert cli.main(["generate", "--remote", "http://192.0.2.1:8000/v1", "hi"]) == 2
    assert "https" in capsys.readouterr().err


def test_removing_a_remote_mid_answer_goes_on_locally(engine_with_remote, proxy):
    from engine import Token

    engine, events = engine_with_remote(stall_s=30.0)
    proxy.set("stall", after_events=4, times=1)
    handle = _ask(engine)
    _wait(lambda: any(isinstance(e, Token) and e.request_id == handle.request_id
                      for e in events))
    engine.remove_remote("remote")
    done = handle.result(60)
    assert done.reason == "stop" and done.text == SCRIPT
    assert _shown(events, handle.request_id) == SCRIPT
    assert "was removed" in _routed(events, handle.request_id)[1].reason
    assert "remote" not in {lane.name for lane in engine.lane_info()}
