"""Metal paths (issue 34) with Metal faked, since no Mac runs here: the wired
limit raised while an engine with a GPU lane is open and put back when the
last one closes (as mlx-lm's generate does); a faked unified-memory GPU
gives a plan that counts weights shared between the CPU and GPU lanes once;
and two lanes' threads run against each other on whatever devices exist
(tests/test_concurrent_lanes.py)."""

from __future__ import annotations

import mlx.core as mx
from engine.core.memory import LaneRequest, plan_memory, shape_from_config
from engine.runtime import weights, wired

GIB = 1 << 30
QWEN25_7B_4BIT = {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                  "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                  "max_position_embeddings": 32768, "tie_word_embeddings": False,
                  "attention_bias": True, "quantization": {"bits": 4, "group_size": 64}}


class FakeMetal:
    """What MLX says on a Mac with `recommended` bytes of working set."""

    def __init__(self, monkeypatch, recommended: int):
        self.limit, self.calls, self.synced = 7, [], []
        monkeypatch.setattr(mx.metal, "is_available", lambda: True)
        monkeypatch.setattr(mx, "is_available", lambda device: True)
        monkeypatch.setattr(mx, "device_info", lambda: {
            "max_recommended_working_set_size": recommended, "memory_size": 2 * recommended})
        monkeypatch.setattr(mx, "set_wired_limit", self.set_wired_limit)
        monkeypatch.setattr(mx, "synchronize", lambda stream=None: self.synced.append(stream))
        monkeypatch.setattr(wired, "_holders", 0)
        monkeypatch.setattr(wired, "_previous", None)

    def set_wired_limit(self, value: int) -> int:
        previous, self.limit = self.limit, value
        self.calls.append(value)
        return previous


def test_the_wired_limit_is_raised_while_engines_are_open_and_then_put_back(monkeypatch):
    metal = FakeMetal(monkeypatch, 12 * GIB)
    assert wired.acquire(4 * GIB) is None  # well under the working set: no note
    assert metal.limit == 12 * GIB
    assert wired.acquire(4 * GIB) is None  # a second engine (the next model loading)
    wired.release()
    assert metal.limit == 12 * GIB  # one is still open
    wired.release(["stream"])
    assert metal.limit == 7 and metal.synced == ["stream"]  # as it was, after the work
    wired.release()  # an extra release changes nothing
    assert metal.calls == [12 * GIB, 7]


def test_a_model_near_the_working_set_gets_a_note(monkeypatch):
    FakeMetal(monkeypatch, 10 * GIB)
    note = wired.acquire(int(9.5 * GIB))
    assert note and "close to the 10.0 GiB" in note and "9.5 GiB" in note
    wired.release()


def test_without_metal_nothing_changes(monkeypatch):
    calls = []
    monkeypatch.setattr(mx.metal, "is_available", lambda: False)
    monkeypatch.setattr(mx, "set_wired_limit", calls.append)
    assert wired.acquire(GIB) is None
    wired.release()
    assert calls == []


def test_a_unified_memory_gpu_shares_the_weights_with_the_cpu_lane_once(monkeypatch):
    FakeMetal(monkeypatch, 20 * GIB)
    budget, unified = weights.machine_budget(0)
    assert unified is True and budget <= 20 * GIB  # at most the recommended working set
    shape = shape_from_config(QWEN25_7B_4BIT)
    lanes = [LaneRequest("gpu", "gpu"), LaneRequest("cpu", "cpu")]
    shared = plan_memory(shape, lanes, 20 * GIB, unified_memory=unified)
    apart = plan_memory(shape, lanes, 20 * GIB, unified_memory=False)
    assert shared.shared_weight_bytes == shape.weight_bytes
    assert shared.lane("cpu").weight_bytes == 0  # reads the GPU lane's arrays
    assert apart.lane("cpu").weight_bytes > 0  # a discrete GPU: the CPU lane's own copy
    def kv(plan):  # what the budget leaves for KV and the prefix cache
        return plan.prefix_cache_bytes + sum(lane.kv_budget_bytes for lane in plan.lanes)

    assert kv(shared) - kv(apart) >= shape.weight_bytes * 0.9  # the copy's bytes, for KV


def test_a_cpu_only_engine_leaves_the_limit_alone_even_on_a_mac(monkeypatch, tiny_loaded):
    """The engine asks for the limit only with a GPU lane: nothing of a
    CPU-only engine is on the GPU."""
    from engine import Engine, LaneSpec

    monkeypatch.setattr(mx.metal, "is_available", lambda: True)
    calls = []
    monkeypatch.setattr(wired, "acquire", lambda nbytes: calls.append(("acquire", nbytes)))
    monkeypatch.setattr(wired, "release", lambda streams=(): calls.append(("release",)))
    engine = Engine(tiny_loaded, lanes=[LaneSpec("cpu", "cpu", "float32")])
    engine.close()
    assert calls == []
