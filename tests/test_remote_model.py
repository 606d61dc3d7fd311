"""A model that runs only on a remote server (engine/remote_model.py): chats
go to its /v1/chat/completions through the same remote lane, breaker and
events; the remote here is a second `tandem serve` of a scripted model
(tests/scripted_model.py), so the answer is known."""

from __future__ import annotations

import pytest

from engine import EngineError, Finished, Routed, SamplingParams, Token
from engine.core.remote import RemoteSpec
from engine.remote_model import RemoteModelEngine
from tests.fault_proxy import FaultProxy
from tests.test_remote_lanes import SCRIPT, remote_server, scripted_dir  # noqa: F401
from tests.test_remote_lanes import _wait

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def proxied(remote_server):  # noqa: F811
    p = FaultProxy(remote_server).start()
    yield p
    p.close()


def _engine(proxy, **options):
    return RemoteModelEngine.load(RemoteSpec(f"{proxy.url}/v1", stall_s=2.0, **options))


def test_a_remote_model_answers_chats(proxied):
    engine = _engine(proxied)
    try:
        events = []
        engine.subscribe(events.append)
        assert engine.model_info.name == "scripted" and engine.model_info.source == \
            "remote:remote"
        assert engine.lane_info()[0].phase == "serving"
        handle = engine.submit(HI, SamplingParams(max_tokens=64), tab_id="7")
        done = handle.result(60)
        assert done.reason == "stop" and done.text == SCRIPT
        assert done.lanes == (("prefill", "remote"), ("decode", "remote"))
        assert done.output_tokens >= 19 and done.prompt_tokens > 0  # the server's counts
        assert "".join(e.text for e in events if isinstance(e, Token)) == SCRIPT
        assert any(isinstance(e, Routed) and e.lane == "remote" for e in events)
        with pytest.raises(EngineError, match="messages"):
            engine.submit(prompt_ids=[1, 2, 3])
        with pytest.raises(EngineError):
            engine.set_mode("cpu-only")
        assert engine.memory_plan.describe() == [
            "Nothing is loaded here: the model runs on a remote server."]
    finally:
        engine.close()


def test_a_failure_mid_answer_keeps_the_text_and_says_why(proxied):
    engine = _engine(proxied)
    try:
        proxied.set("cut", after_events=5, times=1)
        done = engine.submit(HI, SamplingParams(max_tokens=64)).result(60)
        assert done.reason == "error" and "no local model" in done.error
        assert done.text and SCRIPT.startswith(done.text)  # what was shown stays
        assert engine.lane_info()[0].phase in ("down", "retrying")
        # While it is down a chat is refused at once, with the reason.
        if engine.lane_info()[0].phase == "down":
            with pytest.raises(EngineError, match="not answering"):
                engine.submit(HI)
    finally:
        engine.close()


def test_cancel_and_an_unreachable_server(proxied):
    engine = _engine(proxied)
    try:
        proxied.set("stall", after_events=3, times=1)
        events = []
        engine.subscribe(events.append)
        handle = engine.submit(HI, SamplingParams(max_tokens=64))
        _wait(lambda: any(isinstance(e, Token) for e in events))
        handle.cancel()
        assert handle.result(30).reason == "cancelled"
        assert engine.lane_info()[0].phase == "serving"
    finally:
        engine.close()
    proxied.set("refuse")
    with pytest.raises(EngineError, match="cannot be used"):
        _engine(proxied)
