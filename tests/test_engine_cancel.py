"""Cancelling during prefill and during decode frees the slot; others are unaffected."""

import threading

from engine import LaneConfig, LaneSpec, SamplingParams
from tests.helpers import TokenCounter, prompt_of, reference_greedy

OTHERS = ["hello world, how are you today?", "numbers 0123456789 and emoji"]


class StepWatch:
    """A StepGate that paces nothing: it says when its lane waits for work,
    and holds the lane before a step once `hold_when()` is true (the test
    acts, then `release()`s it), so a test waits on a condition, never a clock."""

    def __init__(self):
        self._cond = threading.Condition()
        self._idle = False  # the lane waits for work (since its last step)
        self._holding = False
        self._released = False
        self.hold_when = lambda: False

    def begin(self, lane):
        with self._cond:
            self._idle = False
            if not self._released and self.hold_when():
                self._holding = True
                self._cond.notify_all()
                assert self._cond.wait_for(lambda: self._released, 60)
                self._holding = False

    def end(self, lane, plan, measured_s):
        return measured_s

    def idle(self, lane):
        with self._cond:
            self._idle = True
            self._cond.notify_all()

    def wait_held(self, timeout=30.0):
        """Until the lane stops before a step because `hold_when()` holds."""
        with self._cond:
            assert self._cond.wait_for(lambda: self._holding, timeout), "never held"

    def release(self):
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def wait_idle(self, lane, timeout=30.0):
        """Until the lane has nothing left to do (its KV counted after its last step)."""
        with self._cond:
            assert self._cond.wait_for(lambda: self._idle, timeout), "the lane stayed busy"
        assert lane.is_idle


def test_cancel_during_decode(make_engine, tiny_loaded):
    watch = StepWatch()
    engine = make_engine([LaneSpec("cpu", "cpu", "float32", LaneConfig(gate=watch))])
    counter = TokenCounter(engine)
    others = [engine.submit(prompt_ids=prompt_of(tiny_loaded, t),
                            params=SamplingParams(max_tokens=30)) for t in OTHERS]
    victim = engine.submit(prompt_ids=prompt_of(tiny_loaded, "hello"),
                           params=SamplingParams(max_tokens=400))
    counter.wait_for(victim.request_id, 3)
    victim.cancel()
    done = victim.result(30)
    assert done.reason == "cancelled"
    assert 3 <= done.output_tokens < 400
    for handle, text in zip(others, OTHERS):
        handle.result(60)
        assert handle.request.output_ids == reference_greedy(
            tiny_loaded, prompt_of(tiny_loaded, text), 30)
    lane = engine.lanes["cpu"]
    watch.wait_idle(lane)
    assert lane.batch_size == 0 and lane.kv_bytes == 0


def test_cancel_during_prefill(make_engine, tiny_loaded):
    # Tiny chunks make the long prompt's prefill span many steps; the lane is
    # held before the step after its first chunk, and the cancel comes then.
    watch = StepWatch()
    engine = make_engine([LaneSpec("cpu", "cpu", "float32",
                                   LaneConfig(prefill_chunk=4, prefill_chunk_busy=4,
                                              gate=watch))])
    counter = TokenCounter(engine)
    other = engine.submit(prompt_ids=prompt_of(tiny_loaded, OTHERS[0]),
                          params=SamplingParams(max_tokens=60))
    counter.wait_for(other.request_id, 1)
    long_ids = prompt_of(tiny_loaded, "the quick brown fox " * 20)
    victim = engine.submit(prompt_ids=long_ids, params=SamplingParams(max_tokens=10))
    lane = engine.lanes["cpu"]
    watch.hold_when = lambda: victim.request.num_computed > 0
    watch.wait_held()
    assert 0 < victim.request.num_computed < len(long_ids)
    victim.cancel()
    watch.release()
    done = victim.result(30)
    assert done.reason == "cancelled"
    assert done.output_tokens == 0
    assert victim.request.num_computed < len(long_ids)
    other.result(60)
    assert other.request.output_ids == reference_greedy(
        tiny_loaded, prompt_of(tiny_loaded, OTHERS[0]), 60)
    watch.wait_idle(lane)
    assert lane.batch_size == 0 and lane.kv_bytes == 0


def test_cancel_waiting_request_and_tab(make_engine, tiny_loaded):
    engine = make_engine([LaneSpec("cpu", "cpu", "float32", LaneConfig(max_batch=1))])
    first = engine.submit(prompt_ids=prompt_of(tiny_loaded, OTHERS[0]),
                          params=SamplingParams(max_tokens=30), tab_id="a")
    queued = engine.submit(prompt_ids=prompt_of(tiny_loaded, OTHERS[1]),
                           params=SamplingParams(max_tokens=30), tab_id="b")
    engine.cancel_tab("b")
    assert queued.result(30).reason == "cancelled"
    assert queued.result().output_tokens == 0
    assert first.result(60).reason in ("length", "stop")


def test_close_cancels_everything(make_engine, tiny_loaded):
    engine = make_engine()
    handle = engine.submit(prompt_ids=prompt_of(tiny_loaded, "hello"),
                           params=SamplingParams(max_tokens=10_000))
    engine.close()
    assert handle.result(30).reason in ("cancelled", "length")
