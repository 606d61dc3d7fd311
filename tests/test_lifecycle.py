"""Engine lifecycle: close frees the model, a lane failing mid-step fails its
running request and restarts (waiting ones are answered by the new lane),
close mid-hand-off ends every request exactly once, and admission waits for
KV room."""

import gc
import threading
import weakref

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten

from engine import (Engine, EngineError, EngineErrorEvent, Finished, LaneConfig, LaneSpec, Queued,
                    SamplingParams)
from engine.core.router import Placement
from engine.runtime.runner import ModelRunner
from tests.helpers import TokenCounter, prompt_of, reference_greedy

TEXTS = ["hello world, how are you today?", "numbers 0123456789 and emoji",
         "the quick brown fox jumps over the lazy dog", "hello"]


def _finished_counter(engine):
    seen, lock = {}, threading.Lock()

    def on(event):
        if isinstance(event, Finished):
            with lock:
                seen[event.request_id] = seen.get(event.request_id, 0) + 1
    engine.subscribe(on)
    return seen


def _errors(engine):
    errors = []
    engine.subscribe(lambda e: errors.append(e) if isinstance(e, EngineErrorEvent) else None)
    return errors


def test_close_frees_the_model_and_its_memory(tiny_model_dir, tiny_loaded):
    gc.collect()
    mx.clear_cache()
    baseline = mx.get_active_memory()
    engine = Engine.load(str(tiny_model_dir), lanes=[LaneSpec("cpu", "cpu")])
    model = weakref.ref(engine.lanes["cpu"].model)
    engine.generate(prompt_ids=prompt_of(tiny_loaded, "hello"),
                    params=SamplingParams(max_tokens=20), timeout=60)
    assert engine.memory()["prefix_cache"] > 0
    # What this engine holds, from its own arrays: the process's active memory
    # also moves with arrays earlier tests' threads were still letting go of
    # (it once fell below the baseline during this load).
    loaded_bytes = sum(v.nbytes for _, v in tree_flatten(model().parameters()))
    assert loaded_bytes > 0
    engine.close()
    gc.collect()
    assert model() is None, "the closed engine's model is still referenced"
    assert mx.get_active_memory() - baseline < 0.1 * loaded_bytes


def test_loading_five_times_does_not_grow_memory_or_threads(tiny_model_dir, tiny_loaded):
    """Nor threads and streams: a closed engine's lane thread runs the next
    engine's lane (engine/runtime/lanethreads.py); each load left one behind."""
    from engine.runtime import lanethreads

    sizes, threads = [], []
    for _ in range(5):
        engine = Engine.load(str(tiny_model_dir), lanes=[LaneSpec("cpu", "cpu")])
        engine.generate(prompt_ids=prompt_of(tiny_loaded, "hi"),
                        params=SamplingParams(max_tokens=4), timeout=60)
        engine.close()
        del engine
        gc.collect()
        sizes.append(mx.get_active_memory())
        threads.append(lanethreads.count())
    assert sizes[-1] <= sizes[1] + (1 << 16)
    assert threads[-1] == threads[0]


def test_a_lane_that_fails_at_start_up_is_routed_around(make_engine, tiny_loaded, monkeypatch):
    real_start = ModelRunner.start

    def start(self):
        if threading.current_thread().name == "lane-cpu":
            raise RuntimeError("kv dtype probe failed")
        real_start(self)
    monkeypatch.setattr(ModelRunner, "start", start)
    engine = make_engine([LaneSpec("gpu", "cpu", "float32", acts_as="gpu"),
                          LaneSpec("cpu", "cpu", "float32")])
    assert "kv dtype probe failed" in engine.lanes["cpu"].failed
    assert engine.lanes["gpu"].failed is None
    handles = [engine.submit(prompt_ids=prompt_of(tiny_loaded, t),
                             params=SamplingParams(max_tokens=8)) for t in TEXTS]
    for handle in handles:
        done = handle.result(60)
        assert done.reason in ("length", "stop")
        assert {lane for _, lane in done.lanes} == {"gpu"}
    assert "failed" in engine.describe_lanes()["cpu"]


def test_an_engine_whose_only_lane_fails_at_start_up_says_why(tiny_model_dir, monkeypatch):
    def start(self):
        raise RuntimeError("no device")
    monkeypatch.setattr(ModelRunner, "start", start)
    with pytest.raises(EngineError, match="no device"):
        Engine.load(str(tiny_model_dir), lanes=[LaneSpec("cpu", "cpu")])


def test_a_lane_failing_mid_step_fails_its_running_request_and_restarts(
        make_engine, tiny_loaded, monkeypatch):
    """Before lane restarts (engine/lane_restart.py) the waiting requests
    failed too and every later submit raised 'lane-failed'; now only the
    request in the failed step ends with the error, the others (no device
    state yet) wait for the restarted lane, which answers them as before."""
    engine = make_engine([LaneSpec("cpu", "cpu", "float32", LaneConfig(max_batch=1))])
    errors = _errors(engine)
    finished = _finished_counter(engine)
    counter = TokenCounter(engine)
    real_run = ModelRunner.run
    calls = {"n": 0}
    first = engine.submit(prompt_ids=prompt_of(tiny_loaded, TEXTS[0]),
                          params=SamplingParams(max_tokens=400))
    counter.wait_for(first.request_id, 2)

    def run(self, plan):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("device lost")
        return real_run(self, plan)
    monkeypatch.setattr(ModelRunner, "run", run)
    prompts = [prompt_of(tiny_loaded, t) for t in TEXTS[1:]]
    waiting = [engine.submit(prompt_ids=p, params=SamplingParams(max_tokens=5))
               for p in prompts]
    done = first.result(30)
    assert done.reason == "error" and "device lost" in done.error
    for handle, p in zip(waiting, prompts):
        assert handle.result(60).reason in ("stop", "length")
        assert handle.request.output_ids == reference_greedy(tiny_loaded, p, 5)
    assert all(count == 1 for count in finished.values()) and len(finished) == 4
    assert errors and "device lost" in errors[0].message and errors[0].lane == "cpu"
    assert errors[0].restarting and len(errors) == 1
    later = engine.generate(prompt_ids=prompt_of(tiny_loaded, "hi"),
                            params=SamplingParams(max_tokens=3), timeout=60)
    assert later.reason in ("stop", "length")


class MoveEveryStep:
    """Test policy: every decoding request changes lanes at every chance."""

    name = "move-every-step"

    def place(self, request, lanes):
        return Placement(lanes[0].name, "test")

    def place_decode(self, request, current, lanes):
        return self._other(current, lanes)

    def reconsider(self, request, current, lanes):
        return self._other(current, lanes)

    @staticmethod
    def _other(current, lanes):
        others = [lane.name for lane in lanes if lane.name != current]
        return Placement(others[0] if others else current, "test: move")


def test_close_while_requests_move_ends_each_exactly_once(make_engine, tiny_loaded):
    engine = make_engine([LaneSpec("gpu", "cpu", "float32", acts_as="gpu"),
                          LaneSpec("cpu", "cpu", "float32")], policy=MoveEveryStep())
    for lane in engine.lanes.values():
        lane.reconsider_every = 1
    finished = _finished_counter(engine)
    counter = TokenCounter(engine)
    handles = [engine.submit(prompt_ids=prompt_of(tiny_loaded, TEXTS[i % 4]),
                             params=SamplingParams(max_tokens=300)) for i in range(16)]
    counter.wait_for(handles[0].request_id, 4)
    engine.close()
    for handle in handles:
        assert handle.result(30).reason in ("cancelled", "length", "stop")
    assert sorted(finished) == sorted(h.request_id for h in handles)
    assert set(finished.values()) == {1}


def test_moving_every_step_keeps_greedy_output(make_engine, tiny_loaded):
    engine = make_engine([LaneSpec("gpu", "cpu", "float32", acts_as="gpu"),
                          LaneSpec("cpu", "cpu", "float32")], policy=MoveEveryStep())
    for lane in engine.lanes.values():
        lane.reconsider_every = 1
    ids = prompt_of(tiny_loaded, TEXTS[2])
    done = engine.generate(prompt_ids=ids, params=SamplingParams(max_tokens=30), timeout=60)
    assert done.output_tokens == len(reference_greedy(tiny_loaded, ids, 30))
    assert len(done.lanes) > 10  # it really moved, many times


def test_requests_wait_for_kv_room_and_all_finish(make_engine, tiny_loaded):
    engine = make_engine()
    kv_per_token = engine.memory_plan.kv_bytes_per_token
    prompts = [prompt_of(tiny_loaded, t) for t in TEXTS]
    longest = max(len(p) for p in prompts) + 20
    budget = int(2.5 * longest * kv_per_token)  # two at a time, padded to the longest
    engine.close()
    engine = make_engine([LaneSpec("cpu", "cpu", "float32", LaneConfig(kv_budget_bytes=budget))])
    queued = []
    engine.subscribe(lambda e: queued.append(e) if isinstance(e, Queued) and e.reason else None)
    handles = [engine.submit(prompt_ids=p, params=SamplingParams(max_tokens=20)) for p in prompts]
    for handle, p in zip(handles, prompts):
        handle.result(60)
        assert handle.request.output_ids == reference_greedy(tiny_loaded, p, 20)
    assert queued and all("KV" in e.reason for e in queued)
    assert len({e.request_id for e in queued}) == len(queued)  # said once per request
    with pytest.raises(EngineError) as info:
        engine.submit(prompt_ids=prompts[0], params=SamplingParams(max_tokens=400))
    assert info.value.kind == "too-large-for-memory" and "max_tokens" in str(info.value)


def test_a_lane_with_its_own_format_gets_its_own_counted_copy(make_engine, tiny_loaded):
    engine = make_engine([LaneSpec("gpu", "cpu", "float32", acts_as="gpu"),
                          LaneSpec("cpu", "cpu", "float16")])
    plan = engine.memory_plan
    gpu, cpu = engine.lanes["gpu"].model, engine.lanes["cpu"].model
    assert gpu is not cpu
    assert cpu.model.embed_tokens.weight.dtype == mx.float16
    assert plan.lane("cpu").weight_format == "float16"
    assert plan.lane("cpu").weight_bytes == plan.shared_weight_bytes // 2  # half of float32
    assert plan.lane("gpu").weight_bytes == 0
    ids = prompt_of(tiny_loaded, TEXTS[0])
    done = engine.generate(prompt_ids=ids, params=SamplingParams(max_tokens=8), timeout=60)
    assert done.output_tokens > 0
