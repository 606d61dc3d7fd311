"""Start-up that never waits on a JIT or a probe (issue 20): `Engine(...)`
returns at once, requests submitted before any lane is warm queue (they do
not fail), the first lane to be warm serves them, a lane still warming up is
routed around and joins when ready, one that misses its deadline is turned
off with the reason shown, and a watchdog ends the requests of a lane whose
step hangs, after dumping every thread's stack.

A lane's warm-up (engine/runtime/calibration.py, where a GPU compiles its
kernels) is stood in for by a warm-up that blocks until the test releases
it, so that every test is paced by events, not by time or load."""

import json
import threading

import pytest

from engine import EngineError, LaneSpec, SamplingParams
from engine.core.events import LaneSample, Routed
from engine.runtime import lane as lane_module
from engine.runtime.coststore import CostStore
from engine.runtime.runner import ModelRunner
from tests.helpers import prompt_of
from tests.waiting import wait_until

TWO = [LaneSpec("gpu", "cpu", "float32", acts_as="gpu"), LaneSpec("cpu", "cpu", "float32")]


@pytest.fixture
def held_warm_up(monkeypatch):
    """Lanes named in `gates` warm up only once their event is set."""
    gates: dict[str, threading.Event] = {}
    real = lane_module.warm_up

    def warm_up(model, solo=True, **kwargs):
        gate = gates.get(threading.current_thread().name.removeprefix("lane-"))
        if gate is not None:
            assert gate.wait(60), "the test never released this lane's warm-up"
        return real(model, solo, **kwargs)

    monkeypatch.setattr(lane_module, "warm_up", warm_up)
    yield gates
    for gate in gates.values():
        gate.set()


def _events(engine, kind):
    seen = []
    engine.subscribe(lambda e: seen.append(e) if isinstance(e, kind) else None)
    return seen


def test_engine_returns_at_once_and_requests_queue_until_a_lane_is_warm(
        make_engine, tiny_loaded, held_warm_up):
    held_warm_up.update(gpu=threading.Event(), cpu=threading.Event())
    engine = make_engine(TWO, ready=False)
    assert all(lane.warming_up for lane in engine.lanes.values())
    assert not engine.wait_ready(0.05)
    assert "warming up" in engine.describe_lanes()["gpu"]
    assert {info.phase for info in engine.lane_info()} == {"warming up"}
    routed = _events(engine, Routed)
    handles = [engine.submit(prompt_ids=prompt_of(tiny_loaded, text),
                             params=SamplingParams(max_tokens=4))
               for text in ("hello world", "the quick brown fox", "how are you today?")]
    assert not any(h.request.is_finished for h in handles)  # queued, not refused

    held_warm_up["cpu"].set()  # the CPU lane is ready first: it serves every one
    assert engine.wait_ready(60)
    for handle in handles:
        done = handle.result(60)
        assert done.reason in ("length", "stop")
        assert {lane for _, lane in done.lanes} == {"cpu"}
    prefill = [e for e in routed if e.phase == "prefill"]
    assert any(e.lane == "cpu" and "re-routed: GPU lane still warming up" in e.reason
               for e in prefill), [e.reason for e in prefill]
    assert engine.lanes["gpu"].warming_up and not engine.wait_ready(0.05, every_lane=True)

    held_warm_up["gpu"].set()  # the GPU lane joins once warm
    assert engine.wait_ready(60, every_lane=True)
    assert all(lane.phase == "serving" and lane.cost is not None
               for lane in engine.lanes.values())
    assert "warming up" not in engine.describe_lanes()["gpu"]


def test_gpu_only_queues_for_a_warming_gpu_lane_rather_than_refusing(
        make_engine, tiny_loaded, held_warm_up):
    """The mode decides first: in gpu-only a warming GPU lane is the only lane
    there is, so requests queue for it (not refused, nor sent to the CPU)."""
    held_warm_up["gpu"] = threading.Event()
    engine = make_engine(TWO, ready=False, mode="gpu-only")
    assert engine.wait_ready(60)  # the CPU lane serves, but not in this mode
    handle = engine.submit(prompt_ids=prompt_of(tiny_loaded, "hello"),
                           params=SamplingParams(max_tokens=3))
    assert not handle.request.is_finished
    held_warm_up["gpu"].set()
    done = handle.result(60)
    assert {lane for _, lane in done.lanes} == {"gpu"}


def test_a_lane_that_misses_its_start_up_deadline_is_turned_off(
        make_engine, tiny_loaded, held_warm_up, capfd):
    held_warm_up["gpu"] = threading.Event()  # a JIT that never ends
    engine = make_engine(TWO, ready=False, warm_up_s=0.3)
    samples = _events(engine, LaneSample)
    handle = engine.submit(prompt_ids=prompt_of(tiny_loaded, "hello world"),
                           params=SamplingParams(max_tokens=4))
    done = handle.result(60)  # served by the CPU lane, whichever lane it queued on
    assert done.reason in ("length", "stop") and {lane for _, lane in done.lanes} == {"cpu"}
    gpu = engine.lanes["gpu"]
    assert engine.wait_ready(60, every_lane=True)
    assert gpu.failed and "turned off" in gpu.failed and "start-up deadline" in gpu.failed
    assert "turned off" in engine.describe_lanes()["gpu"]
    assert [i.phase for i in engine.lane_info()] == ["failed", "serving"]
    # The dock's samples say so, and the watchdog dumped every thread's stack.
    assert wait_until(lambda: any(s.lane == "gpu" and s.phase == "failed" for s in samples), 10)
    err = capfd.readouterr().err
    assert "tandem watchdog" in err and "_start_up" in err  # where the lane was stuck
    # Later requests go to the lane that serves.
    again = engine.generate(prompt_ids=prompt_of(tiny_loaded, "again"),
                            params=SamplingParams(max_tokens=3), timeout=60)
    assert {lane for _, lane in again.lanes} == {"cpu"}


def test_the_watchdog_ends_requests_of_a_lane_whose_step_hangs(
        make_engine, tiny_loaded, monkeypatch, capfd):
    engine = make_engine(watchdog_s=0.3)
    hang, calls = threading.Event(), {"n": 0}
    real_run = ModelRunner.run

    def run(self, plan):
        calls["n"] += 1
        if calls["n"] == 3:
            hang.wait(60)  # a device that never answers
        return real_run(self, plan)

    monkeypatch.setattr(ModelRunner, "run", run)
    try:
        handle = engine.submit(prompt_ids=prompt_of(tiny_loaded, "hello world"),
                               params=SamplingParams(max_tokens=50))
        done = handle.result(60)
        assert done.reason == "error" and "watchdog" in done.error
        assert "tandem watchdog" in capfd.readouterr().err
        with pytest.raises(EngineError, match="watchdog") as info:
            engine.submit(prompt_ids=prompt_of(tiny_loaded, "hi"))
        assert info.value.kind == "lane-failed"
    finally:
        hang.set()


def test_every_lane_failing_to_start_is_an_error_from_wait_ready(
        make_engine, monkeypatch):
    def start(self):
        raise RuntimeError("no device")

    monkeypatch.setattr(ModelRunner, "start", start)
    engine = make_engine(ready=False)
    with pytest.raises(EngineError, match="no device"):
        engine.wait_ready(60)


def test_learned_contention_is_kept_for_the_next_run(make_engine, tmp_path):
    path = tmp_path / "costs.json"
    engine = make_engine(TWO, cost_store=str(path))
    assert all(lane.cost.contention == 0.0 for lane in engine.lanes.values())
    for lane in engine.lanes.values():  # as if learned online from contended steps
        lane.cost.contention, lane.cost.contended_samples = 0.4, 25
    engine.lanes["cpu"].cost.contended_samples = 3  # too few to keep
    gpu = engine.lanes["gpu"].cost  # and beside the other lane's prefills
    gpu.prefill_contention, gpu.prefill_contended_samples = 0.9, 30
    engine.close()
    stored = json.loads(path.read_text())
    assert list(stored.values()) == [{"gpu": 0.4, "gpu:prefill": 0.9}]
    second = make_engine(TWO, cost_store=str(path))
    assert second.lanes["gpu"].cost.contention == pytest.approx(0.4)
    assert second.lanes["gpu"].cost.prefill_contention == pytest.approx(0.9)
    assert second.lanes["gpu"].cost.contention_known
    assert second.lanes["gpu"].cost.prefill_contention_known
    assert second.lanes["cpu"].cost.contention == 0.0
    assert not second.lanes["cpu"].cost.contention_known


def test_a_damaged_cost_store_is_the_same_as_none(tmp_path):
    path = tmp_path / "costs.json"
    store = CostStore(path, "m", TWO)
    path.write_text("{not json")
    assert store.load() == {}
    path.write_text(json.dumps({store.key: {"gpu": "x", "cpu": -1, "other": 0.2}}))
    assert store.load() == {"other": 0.2}


def test_stop_while_no_lane_serves_ends_the_request_at_once(make_engine, tiny_loaded,
                                                           held_warm_up):
    """A request queued on a lane still warming up (nothing plans it for a
    while) is cancelled at once, not when the lane is finally ready."""
    held_warm_up["cpu"] = threading.Event()
    engine = make_engine(ready=False)
    handle = engine.submit(prompt_ids=prompt_of(tiny_loaded, "hello world"),
                           params=SamplingParams(max_tokens=4))
    handle.cancel()
    done = handle.result(10)
    assert done.reason == "cancelled" and done.output_tokens == 0
    assert engine.lanes["cpu"].warming_up  # it ended without the lane
    held_warm_up["cpu"].set()
    assert engine.wait_ready(60)
    again = engine.generate(prompt_ids=prompt_of(tiny_loaded, "hello world"),
                            params=SamplingParams(max_tokens=4), timeout=60)
    assert again.reason in ("length", "stop")
