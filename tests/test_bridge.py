"""The engine bridge: ordered, coalesced delivery on the GUI thread."""

import sys

from app.models.bridge import EngineBridge
from engine.core.events import Finished, Queued, Token


def _finished(rid):
    return Finished(rid, None, reason="stop", text="", prompt_tokens=1, cached_tokens=0,
                    output_tokens=1, ttft_s=0.1, time_per_output_token_s=None, e2e_s=0.2)


def test_tokens_are_coalesced_and_finished_comes_after_text(qtbot):
    bridge = EngineBridge()
    got = []
    bridge.tokens.connect(lambda rid, text: got.append(("tokens", rid, text)))
    bridge.finished.connect(lambda f: got.append(("finished", f.request_id)))
    bridge.queued.connect(lambda q: got.append(("queued", q.request_id)))
    events = [Queued("a", None, 3)] + [Token("a", None, i, t, "cpu") for i, t in
                                       enumerate(["Hel", "lo", " wor", "ld"])]
    events += [Token("b", None, 9, "x", "cpu"), _finished("a")]
    for e in events:
        bridge._on_engine_event(e)
    bridge.flush()
    assert got[0] == ("queued", "a")
    assert ("tokens", "a", "Hello world") in got
    assert got.index(("tokens", "a", "Hello world")) < got.index(("finished", "a"))
    assert ("tokens", "b", "x") in got


def test_signal_emit_does_not_leak_references(qtbot):
    # PySide6 6.12.0's Signal.emit drops a reference to the bool it returns,
    # which crashes the interpreter at exit once the app has emitted enough.
    bridge = EngineBridge()
    bridge.tokens.connect(lambda rid, text: None)
    before = sys.getrefcount(True)
    for _ in range(200):
        bridge.tokens.emit("r", "t")
    assert sys.getrefcount(True) >= before - 5


def test_a_lane_that_restarts_keeps_its_card(qtbot):
    """A lane failure the engine restarts (EngineErrorEvent.restarting) is
    said as an error but does not turn the lane's card off: the card shows
    its phases ('restarting', 'warming up') from the samples and serves on
    (engine/lane_restart.py); one that stays failed turns it off."""
    from engine.core.events import EngineErrorEvent

    bridge = EngineBridge()
    failed, errors = [], []
    bridge.lane_failed.connect(lambda lane, why: failed.append((lane, why)))
    bridge.error.connect(errors.append)
    bridge._on_engine_event(EngineErrorEvent("", None, message="CPU lane failed mid-step: x; "
                                             "restarting the lane", lane="cpu", restarting=True))
    bridge._on_engine_event(EngineErrorEvent("", None, message="CPU lane failed mid-step: y; "
                                             "it failed repeatedly", lane="cpu"))
    bridge.flush()
    assert failed == [("cpu", "CPU lane failed mid-step: y; it failed repeatedly")]
    assert len(errors) == 2
