"""A lane that is slow to start (a GPU compiling its kernels, a slow CPU lane)
does not hold up the engine (issue 20): construction waits at most
`startup_wait_s`, requests go to the ready lane meanwhile, and the slow lane
joins routing once it has calibrated."""

import threading

from engine import LaneSpec, SamplingParams
from engine.runtime.lane import Lane
from tests.helpers import prompt_of


def test_a_lane_still_warming_up_is_routed_around_then_joins(make_engine, tiny_loaded,
                                                             monkeypatch):
    release = threading.Event()
    real = Lane._start_up

    def slow_start(lane):  # the "cpu" lane's start-up takes until the test says so
        if lane.name == "cpu":
            release.wait(60)
        return real(lane)

    monkeypatch.setattr(Lane, "_start_up", slow_start)
    engine = make_engine([LaneSpec("gpu", "cpu", "float32", acts_as="gpu"),
                          LaneSpec("cpu", "cpu", "float32")], startup_wait_s=0.5)
    try:
        assert engine.lanes["cpu"].warming_up and not engine.lanes["gpu"].warming_up
        assert "warming up" in engine.describe_lanes()["cpu"]
        prompt = prompt_of(tiny_loaded, "hello world, how are you today?")
        done = [engine.generate(prompt_ids=prompt, params=SamplingParams(max_tokens=4),
                                timeout=60) for _ in range(3)]
        assert all(d.lanes and {lane for _, lane in d.lanes} == {"gpu"} for d in done)
    finally:
        release.set()
    assert engine.lanes["cpu"].calibrated.wait(60) and engine.lanes["cpu"].probed.wait(60)
    assert not engine.lanes["cpu"].warming_up and engine.lanes["cpu"].cost is not None
    # ready now: with the GPU lane busy, requests may go to it again
    assert "warming up" not in engine.describe_lanes()["cpu"]


def test_gpu_only_waits_for_a_warming_gpu_lane_rather_than_refusing(make_engine, tiny_loaded,
                                                                   monkeypatch):
    """The mode decides first: in gpu-only a warming GPU lane is the only lane
    there is, so requests queue for it (they are not refused, nor sent to the CPU)."""
    release = threading.Event()
    real = Lane._start_up

    def slow_start(lane):
        if lane.name == "gpu":
            release.wait(60)
        return real(lane)

    monkeypatch.setattr(Lane, "_start_up", slow_start)
    engine = make_engine([LaneSpec("gpu", "cpu", "float32", acts_as="gpu"),
                          LaneSpec("cpu", "cpu", "float32")], startup_wait_s=0.5,
                         mode="gpu-only")
    try:
        assert engine.lanes["gpu"].warming_up
        handle = engine.submit(prompt_ids=prompt_of(tiny_loaded, "hello"),
                               params=SamplingParams(max_tokens=3))
    finally:
        release.set()
    done = handle.result(60)
    assert {lane for _, lane in done.lanes} == {"gpu"}
