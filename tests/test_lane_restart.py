"""A lane whose step raised is restarted (engine/lane_restart.py): the
request in flight ends with "error", the lane warms up again on the same
thread and weights and answers as a fresh one; it restarts at most 3 times
in 10 minutes, then stays failed (/health 503); closing the engine during a
restart leaves no thread and does not hang."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from engine import EngineError, EngineErrorEvent, SamplingParams
from engine.core.restarts import RestartBudget
from engine.runtime import lane as lane_module
from engine.runtime import lanethreads
from engine.runtime.calibration import StartCancelled
from engine.runtime.runner import ModelRunner
from tests.helpers import prompt_of, reference_greedy


def test_the_budget_allows_three_restarts_in_ten_minutes():
    budget = RestartBudget()
    assert [budget.take("cpu", t) for t in (0.0, 10.0, 20.0)] == [True, True, True]
    assert not budget.take("cpu", 30.0)  # a fourth failure within the window
    assert "failed repeatedly (4 times in 10 minutes" in budget.given_up("boom", "cpu", 30.0)
    assert budget.take("gpu", 30.0)  # each lane its own
    assert budget.take("cpu", 600.5)  # the first restart has left the window
    assert "restart 3 of at most 3 in 10 minutes" in budget.restarted("boom", "cpu", 600.5)


def _fail_steps(monkeypatch, which):
    """Every runner's step raises where `which(n)` (n: the n-th step with work)."""
    real, calls = ModelRunner.run, {"n": 0}

    def run(self, plan):
        if plan.has_work:
            calls["n"] += 1
            if which(calls["n"]):
                raise RuntimeError(f"device lost at step {calls['n']}")
        return real(self, plan)

    monkeypatch.setattr(ModelRunner, "run", run)
    return calls


class _GatedWarmUps:
    """Lets the lane's first warm-up run; later ones (restarts) wait for
    `gate` (or end when their lane is closed)."""

    def __init__(self, monkeypatch, lanes: int = 1):
        self.gate, self.entered, self.calls = threading.Event(), threading.Event(), 0
        counted = threading.Lock()  # lanes warm up at once
        real = lane_module.warm_up

        def warm_up(model, solo=True, steps=3, cancelled=lambda: False):
            with counted:
                self.calls += 1
                later = self.calls > lanes
            if later:
                self.entered.set()
                # Held until the test opens the gate; meanwhile it checks its
                # lane's cancel flag, as the real warm-up does between steps.
                while not self.gate.wait(0.02):
                    if cancelled():
                        raise StartCancelled()
            return real(model, solo, steps, cancelled)

        monkeypatch.setattr(lane_module, "warm_up", warm_up)


def _health(served) -> tuple[int, dict]:
    reply = httpx.get(served.url + "/health")
    return reply.status_code, reply.json()


def test_a_lane_whose_step_raises_restarts_and_answers_again(make_engine, tiny_loaded,
                                                             monkeypatch):
    from tests.test_server import Served

    gated = _GatedWarmUps(monkeypatch)
    engine = make_engine()
    errors = []
    engine.subscribe(lambda e: errors.append(e) if isinstance(e, EngineErrorEvent) else None)
    old, made = engine.lanes["cpu"], lanethreads.count()
    weights = old.model
    _fail_steps(monkeypatch, lambda n: n == 2)
    served = Served(engine)
    try:
        assert _health(served) == (200, {"status": "ok", "model": "tiny", "in_flight": 0})
        first = engine.submit(prompt_ids=prompt_of(tiny_loaded, "hello world"),
                              params=SamplingParams(max_tokens=50))
        done = first.result(60)
        assert done.reason == "error" and "device lost at step 2" in done.error
        assert "restarting the lane (restart 1 of at most 3" in done.error
        assert errors and errors[0].lane == "cpu" and errors[0].restarting
        # The new lane warms up (held here); a request sent meanwhile waits for it.
        assert gated.entered.wait(60)
        new = engine.lanes["cpu"]
        assert new is not old and old._stopped.is_set()
        [info] = engine.lane_info()
        assert info.failed is None and info.phase == "warming up"
        assert "device lost" in info.restarting
        status, body = _health(served)
        assert status == 200 and body["status"] == "degraded"
        assert "warming up after: CPU lane failed mid-step" in body["lanes"]["cpu"]
        ids = prompt_of(tiny_loaded, "the quick brown fox")
        waiting = engine.submit(prompt_ids=ids, params=SamplingParams(max_tokens=20))
        gated.gate.set()
        assert waiting.result(60).reason in ("stop", "length")
        assert waiting.request.output_ids == reference_greedy(tiny_loaded, ids, 20)
        assert {lane for _, lane in waiting.request.lane_history} == {"cpu"}
        assert engine.lane_info()[0].phase == "serving"
        assert engine.lane_info()[0].restarting is None
        assert _health(served) == (200, {"status": "ok", "model": "tiny", "in_flight": 0})
        assert lanethreads.count() == made  # on the old lane's parked thread and stream
        assert new.model is weights and old.model is None  # the same weights, reused
    finally:
        gated.gate.set()
        served.stop()


def test_the_other_lane_serves_while_one_restarts(make_engine, tiny_loaded, monkeypatch):
    """Two lanes: the CPU lane's step raises; while it restarts (held in its
    warm-up) a request goes to the other lane; once it serves it is routed
    to again, with the cost model it had learned (no calibration)."""
    from engine import LaneSpec

    gated = _GatedWarmUps(monkeypatch, lanes=2)
    engine = make_engine([LaneSpec("gpu", "cpu", "float32", acts_as="gpu"),
                          LaneSpec("cpu", "cpu", "float32")])
    old = engine.lanes["cpu"]
    cost = old.scheduler.cost
    assert cost is not None
    real = ModelRunner.run

    def run(self, plan):
        if self is old.runner and plan.has_work:
            raise RuntimeError("device lost on the CPU lane")
        return real(self, plan)

    monkeypatch.setattr(ModelRunner, "run", run)
    try:
        engine.set_mode("cpu-only")
        done = engine.generate(prompt_ids=prompt_of(tiny_loaded, "hello"),
                               params=SamplingParams(max_tokens=8), timeout=60)
        assert done.reason == "error" and "device lost on the CPU lane" in done.error
        assert gated.entered.wait(60)
        engine.set_mode("hybrid")
        ids = prompt_of(tiny_loaded, "numbers 0123456789")
        meanwhile = engine.generate(prompt_ids=ids, params=SamplingParams(max_tokens=10),
                                    timeout=60)
        assert meanwhile.reason in ("stop", "length")
        assert {lane for _, lane in meanwhile.lanes} == {"gpu"}
        assert {i.name: i.phase for i in engine.lane_info()} == {"gpu": "serving",
                                                                 "cpu": "warming up"}
        gated.gate.set()
        assert engine.wait_ready(60, every_lane=True)
        new = engine.lanes["cpu"]
        assert new is not old and new.phase == "serving" and new.scheduler.cost is cost
        engine.set_mode("cpu-only")
        ids = prompt_of(tiny_loaded, "the quick brown fox")
        again = engine.submit(prompt_ids=ids, params=SamplingParams(max_tokens=10))
        assert again.result(60).reason in ("stop", "length")
        assert {lane for _, lane in again.request.lane_history} == {"cpu"}
        assert again.request.output_ids == reference_greedy(tiny_loaded, ids, 10)
    finally:
        gated.gate.set()


def test_a_lane_that_keeps_failing_stays_failed_after_three_restarts(make_engine, tiny_loaded,
                                                                     monkeypatch):
    from tests.test_server import Served

    engine = make_engine()
    _fail_steps(monkeypatch, lambda n: True)
    served = Served(engine)
    try:
        for attempt in range(4):
            lane = engine.lanes["cpu"]
            done = engine.generate(prompt_ids=prompt_of(tiny_loaded, f"try {attempt}"),
                                   params=SamplingParams(max_tokens=8), timeout=60)
            assert done.reason == "error" and "device lost" in done.error
            assert lane._stopped.wait(60)
            if attempt < 3:
                assert f"restart {attempt + 1} of at most 3" in done.error
                assert engine.lanes["cpu"] is not lane
                assert engine.wait_ready(60, every_lane=True)
                assert engine.lanes["cpu"].phase == "serving"
        assert "failed repeatedly (4 times in 10 minutes, restarted 3)" in done.error
        assert engine.lanes["cpu"] is lane and lane.phase == "failed"
        with pytest.raises(EngineError, match="failed repeatedly") as info:
            engine.submit(prompt_ids=prompt_of(tiny_loaded, "hi"))
        assert info.value.kind == "lane-failed"
        status, body = _health(served)
        assert status == 503 and body["status"] == "failed"
        assert "failed repeatedly" in body["lanes"]["cpu"]
    finally:
        served.stop()


def test_closing_the_engine_during_a_restart_is_clean(make_engine, tiny_loaded, monkeypatch):
    gated = _GatedWarmUps(monkeypatch)
    engine = make_engine()
    _fail_steps(monkeypatch, lambda n: n == 1)
    done = engine.generate(prompt_ids=prompt_of(tiny_loaded, "hello"),
                           params=SamplingParams(max_tokens=8), timeout=60)
    assert done.reason == "error"
    assert gated.entered.wait(60)  # the new lane warms up
    new = engine.lanes["cpu"]
    waiting = engine.submit(prompt_ids=prompt_of(tiny_loaded, "hi"),
                            params=SamplingParams(max_tokens=8))
    started = time.monotonic()
    engine.close()
    assert time.monotonic() - started < 20
    assert waiting.result(10).reason == "cancelled"
    assert new._stopped.is_set() and new.model is None
    assert not [t for t in threading.enumerate() if t.name.startswith("lane-restart-")]
    # The lane's thread parks just after its lane ends: waited for on the
    # condition the parking notifies (other tests' engines may hold lanes
    # named "cpu" meanwhile: this lane's own thread is the one asked after).
    from engine.runtime import lanethreads

    thread = new.lane_thread
    assert thread is not None
    with lanethreads._parked_now:
        assert lanethreads._parked_now.wait_for(
            lambda: any(thread in idle for idle in lanethreads._parked.values()), 30)


def test_closing_before_the_restart_starts_leaves_its_lane_unstarted(make_engine, tiny_loaded,
                                                                    monkeypatch):
    """The engine closes while the failed lane's thread is still ending: the
    new lane never starts, and close does not wait on it."""
    engine = make_engine()
    release = threading.Event()
    real_end = lane_module.Lane._end_all

    def slow_end(self, reason, error=None):
        if reason == "error":  # the failed lane's thread, ending
            assert release.wait(60)
        real_end(self, reason, error)

    restarts = engine.restarts
    real_close = restarts.close

    def close():  # the restarts are shut before the old lane's thread ends
        with restarts._lock:
            restarts._closed = True
        release.set()
        real_close()

    monkeypatch.setattr(lane_module.Lane, "_end_all", slow_end)
    monkeypatch.setattr(restarts, "close", close)
    failed = threading.Event()
    engine.subscribe(lambda e: failed.set() if isinstance(e, EngineErrorEvent) else None)
    _fail_steps(monkeypatch, lambda n: n == 1)
    old = engine.lanes["cpu"]
    first = engine.submit(prompt_ids=prompt_of(tiny_loaded, "hello"),
                          params=SamplingParams(max_tokens=8))
    assert failed.wait(60)  # said once the new lane was put in its place
    new = engine.lanes["cpu"]
    assert new is not old and new.phase == "restarting"
    engine.close()
    assert first.result(10).reason == "error"
    assert new._thread is None and new._stopped.is_set() and new.model is None
    assert old._stopped.is_set()
    assert not [t for t in threading.enumerate() if t.name.startswith("lane-restart-")]
