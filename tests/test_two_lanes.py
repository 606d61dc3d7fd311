"""Two real CPU lanes: spreading, migration, mode switches and cancellation.

One CPU lane stands in for the GPU (`acts_as="gpu"`), so the router's modes
and the lane-to-lane hand-off run for real on this GPU-less machine.
"""

import threading

from engine import LaneSpec, Migrated, Routed, SamplingParams
from engine.core.router import LeastLoadedPolicy, Placement
from tests.helpers import TokenCounter, prompt_of, reference_greedy

TEXTS = ["hello world, how are you today?", "numbers 0123456789 and emoji",
         "the quick brown fox jumps over the lazy dog, and then the fox", "hello"]


def _two_lanes():
    return [LaneSpec("gpu", "cpu", "float32", acts_as="gpu"), LaneSpec("cpu", "cpu", "float32")]


class PingPong:
    """Test policy: prefill on one lane, decode on the other, then move back."""

    name = "ping-pong"

    def __init__(self, first="gpu", second="cpu"):
        self.first, self.second = first, second

    def place(self, request, lanes):
        return Placement(self.first, "test: prefill here")

    def place_decode(self, request, current, lanes):
        return Placement(self.second, "test: decode on the other lane")

    def reconsider(self, request, current, lanes):
        if current == self.second and request.output_tokens >= 40:
            return Placement(self.first, "test: move back")
        return None


def _events(engine, kind):
    seen, lock = [], threading.Lock()

    def on(event):
        if isinstance(event, kind):
            with lock:
                seen.append(event)
    engine.subscribe(on)
    return seen


def test_requests_spread_across_lanes(make_engine, tiny_loaded):
    engine = make_engine(_two_lanes(), policy=LeastLoadedPolicy())
    routed = _events(engine, Routed)
    handles = [engine.submit(prompt_ids=prompt_of(tiny_loaded, t),
                             params=SamplingParams(max_tokens=20)) for t in TEXTS]
    for handle, text in zip(handles, TEXTS):
        handle.result(60)
        assert handle.request.output_ids == reference_greedy(
            tiny_loaded, prompt_of(tiny_loaded, text), 20)
    lanes = {e.lane for e in routed if e.phase == "prefill"}
    assert lanes == {"gpu", "cpu"}


def test_assigning_a_policy_takes_effect_for_the_next_request(make_engine, tiny_loaded):
    engine = make_engine(_two_lanes(), policy=PingPong("gpu", "gpu"))
    engine.policy = PingPong("cpu", "cpu")
    assert engine.policy.first == "cpu"
    done = engine.generate(prompt_ids=prompt_of(tiny_loaded, "hello"),
                           params=SamplingParams(max_tokens=4))
    assert {lane for _, lane in done.lanes} == {"cpu"}


def test_migrated_request_gives_the_same_greedy_tokens(make_engine, tiny_loaded):
    engine = make_engine(_two_lanes(), policy=PingPong())
    for lane in engine.lanes.values():
        lane.reconsider_every = 1
    migrated = _events(engine, Migrated)
    ids = prompt_of(tiny_loaded, TEXTS[0])
    other = engine.submit(prompt_ids=prompt_of(tiny_loaded, TEXTS[1]),
                          params=SamplingParams(max_tokens=60))
    handle = engine.submit(prompt_ids=ids, params=SamplingParams(max_tokens=60))
    done = handle.result(60)
    other.result(60)
    assert handle.request.output_ids == reference_greedy(tiny_loaded, ids, 60)
    assert done.lanes[:3] == (("prefill", "gpu"), ("decode", "cpu"), ("decode", "gpu"))
    moves = [(m.from_lane, m.to_lane) for m in migrated if m.request_id == handle.request_id]
    assert moves == [("gpu", "cpu"), ("cpu", "gpu")]
    # The streamed text is whole: nothing lost or repeated across the moves.
    assert done.output_tokens == len(handle.request.output_ids)


def test_a_sampled_request_moves_between_lanes(make_engine, tiny_loaded):
    """Its PRNG key travels evaluated: a key still lazy on the first lane's
    stream failed the second lane's step ('There is no Stream(cpu, 1) in
    current thread') once chats sampled by default."""
    engine = make_engine(_two_lanes(), policy=PingPong())
    for lane in engine.lanes.values():
        lane.reconsider_every = 1
    handles = [engine.submit(prompt_ids=prompt_of(tiny_loaded, text), params=SamplingParams(
        max_tokens=60, temperature=1.0, top_p=0.9, repetition_penalty=1.1, seed=seed))
        for seed, text in enumerate(TEXTS)]
    for handle in handles:
        done = handle.result(60)
        assert done.reason in ("stop", "length"), done.error
        assert done.lanes[:2] == (("prefill", "gpu"), ("decode", "cpu"))
        assert done.output_tokens == len(handle.request.output_ids) > 1


def test_mode_switch_mid_flight_completes_every_request_once(make_engine, tiny_loaded):
    engine = make_engine(_two_lanes(), policy=LeastLoadedPolicy(), mode="hybrid")
    counter = TokenCounter(engine)
    finished = []
    engine.subscribe(lambda e: finished.append(e.request_id) if type(e).__name__ == "Finished"
                     else None)
    first = [engine.submit(prompt_ids=prompt_of(tiny_loaded, t),
                           params=SamplingParams(max_tokens=40)) for t in TEXTS]
    counter.wait_for(first[0].request_id, 3)
    engine.set_mode("gpu-only")
    routed = _events(engine, Routed)
    second = [engine.submit(prompt_ids=prompt_of(tiny_loaded, t),
                            params=SamplingParams(max_tokens=10)) for t in TEXTS]
    engine.set_mode("hybrid")
    third = [engine.submit(prompt_ids=prompt_of(tiny_loaded, t),
                           params=SamplingParams(max_tokens=10)) for t in TEXTS]
    handles = first + second + third
    for handle in handles:
        handle.result(60)
    assert sorted(finished) == sorted(h.request_id for h in handles)
    second_ids = {h.request_id for h in second}
    assert all(e.lane == "gpu" for e in routed
               if e.request_id in second_ids and e.phase == "prefill")
    for handle, text in zip(first, TEXTS):
        assert handle.request.output_ids == reference_greedy(
            tiny_loaded, prompt_of(tiny_loaded, text), 40)


def test_cancel_on_either_lane(make_engine, tiny_loaded):
    engine = make_engine(_two_lanes(), policy=LeastLoadedPolicy())
    counter = TokenCounter(engine)
    victims = [engine.submit(prompt_ids=prompt_of(tiny_loaded, t),
                             params=SamplingParams(max_tokens=500)) for t in TEXTS[:2]]
    lanes = {engine.lane_of(v.request_id) for v in victims}
    assert lanes == {"gpu", "cpu"}
    for v in victims:
        counter.wait_for(v.request_id, 2)
        v.cancel()
    for v in victims:
        assert v.result(30).reason == "cancelled"
    ok = engine.generate(prompt_ids=prompt_of(tiny_loaded, TEXTS[2]),
                         params=SamplingParams(max_tokens=10), timeout=60)
    assert ok.output_tokens == 10 or ok.reason == "stop"


def test_cost_aware_engine_calibrates_and_explains(make_engine, tiny_loaded):
    from engine.core.policies import CostAwarePolicy

    engine = make_engine(_two_lanes())
    assert isinstance(engine.policy, CostAwarePolicy)
    assert all(lane.cost is not None for lane in engine.lanes.values())
    # Every lane warmed up, calibrated alone and serves; contention starts at
    # none (no stored value) and is learned online.
    assert all(lane.phase == "serving" and lane.ready.is_set() and lane.warm_up_seconds
               for lane in engine.lanes.values())
    assert all(lane.cost.contention == 0.0 for lane in engine.lanes.values())
    routed = _events(engine, Routed)
    handles = [engine.submit(prompt_ids=prompt_of(tiny_loaded, t),
                             params=SamplingParams(max_tokens=30)) for t in TEXTS]
    for handle, text in zip(handles, TEXTS):
        handle.result(60)
        assert handle.request.output_ids == reference_greedy(
            tiny_loaded, prompt_of(tiny_loaded, text), 30)
    prefill = [e for e in routed if e.phase == "prefill"]
    assert prefill and all("done in" in e.reason and e.predicted_s for e in prefill)
    # The lanes learn from their steps. A step during which the other lane
    # started or stopped says nothing clear and is not observed
    # (LaneScheduler._observe): a lane that ran only a step or two (a prefill
    # moved on) may have learned nothing; seen once in ten loaded full runs.
    assert any(lane.cost.samples > 0 for lane in engine.lanes.values())
    assert all(lane.cost.samples > 0 for lane in engine.lanes.values()
               if lane.stats.steps >= 4)
