"""Closing leaves no thread at work (issue 49): the crash at exit was a
thread still running as the interpreter finalized. Python 3.11 ends such a
daemon thread with pthread_exit, which a thread inside llguidance (Rust:
SIGSEGV) or one that used MLX (its thread-local destructors take the GIL:
SIGABRT) does not survive. So each owner of a thread waits for it: a lane
for its thread to park (engine/runtime/lanethreads.py), the grammar
builder for its build under way and its thread to end, the disk tier for
its writer (past its time limit: after the file it is writing)."""

from __future__ import annotations

import threading

from engine.core.errors import EngineError
from engine.runtime import grammar_build, kv_file, lanethreads
from engine.runtime.disk_tier import DiskTier
from engine.runtime.lane import Lane
from tests.test_disk_tier import BLOCK, LAYOUT, LONG, MODEL, kv_of

WAIT_S = 60  # at most, for what the test waits on (never reached when it passes)


def test_a_closed_lanes_thread_has_parked_when_close_returns(make_engine, monkeypatch):
    """The lane's job ends, then its thread is held before parking until
    close() has returned or waits for the parking: close must wait (before,
    it returned once the job's last line ran, the thread still in Python)."""
    seen = threading.Condition()
    state = {"returned": False, "waiting": False}
    real_run = Lane._run
    real_wait = getattr(lanethreads.LaneThread, "wait_parked", None)  # (None: no such wait)

    def run(self, stream):
        real_run(self, stream)
        with seen:
            seen.wait_for(lambda: state["returned"] or state["waiting"], WAIT_S)
            state["parked_after_close"] = state["returned"]

    def wait_parked(self, ticket, timeout):
        with seen:
            state["waiting"] = True
            seen.notify_all()
        return real_wait(self, ticket, timeout)

    monkeypatch.setattr(Lane, "_run", run)
    if real_wait is not None:
        monkeypatch.setattr(lanethreads.LaneThread, "wait_parked", wait_parked)
    engine = make_engine()
    thread = engine.lanes["cpu"].lane_thread
    engine.close()
    with seen:
        state["returned"] = True
        seen.notify_all()
    assert state.get("parked_after_close") is False
    with lanethreads._parked_now:
        assert thread in lanethreads._parked[(thread.device, thread.nice)]


def test_closing_the_grammar_builder_waits_for_its_build_and_starts_no_other():
    started, go = threading.Event(), threading.Event()
    built: list[str] = []

    def build(kind, text):
        built.append(text)
        started.set()
        go.wait(WAIT_S)  # a build under way (llguidance's tokenizer, at load)
        return object()

    builder = grammar_build.GrammarBuilder(build)
    first = threading.Thread(target=builder.get, args=("regex", "first"), daemon=True)
    first.start()
    assert started.wait(WAIT_S)
    builder.run_first(lambda: built.append("queued"))  # behind the build: never runs
    closed: dict = {}

    def close():
        closed["done"] = builder.close()
        closed["alive"] = builder._thread.is_alive()

    closer = threading.Thread(target=close)
    closer.start()
    go.set()
    closer.join(WAIT_S)
    first.join(WAIT_S)
    assert closed == {"done": True, "alive": False} and built == ["first"]
    try:
        builder.get("regex", "after")
    except EngineError as e:
        assert e.kind == "closed"
    else:
        raise AssertionError("a closed builder built")


def test_a_save_past_the_close_time_stops_after_the_file_being_written(tiny_loaded, tmp_path,
                                                                      monkeypatch):
    """The writer is held inside its first file's write through close()'s
    time limit: close says so, the writer writes that file whole, writes no
    other, and parks; the tier reads it back."""
    tokens, layers = kv_of(tiny_loaded, LONG)
    tier = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, segment_tokens=BLOCK, layout=LAYOUT)
    writing, go = threading.Event(), threading.Event()
    real = kv_file.write

    def write(path, data):
        writing.set()
        go.wait(WAIT_S)
        real(path, data)

    monkeypatch.setattr(kv_file, "write", write)
    assert tier.save(tokens, layers)
    assert writing.wait(WAIT_S)
    assert tier.close(0.01) is False  # the time limit passed: stop after this file
    go.set()
    assert tier.close(WAIT_S)  # the writer has parked
    files = sorted(tier.folder.glob("*.kv"))
    assert len(files) == 1 and len(tokens) > 4 * BLOCK
    again = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT)
    match = again.match(tokens)
    assert match.num_tokens == BLOCK and again.read(match)[0] == BLOCK
