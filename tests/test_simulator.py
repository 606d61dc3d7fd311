"""Routing on the SIMULATED lanes (virtual time, cost profiles), hand-checked."""

import pytest

from engine.core.costmodel import CostModel
from engine.core.policies import CostAwarePolicy, WarmPrefixPolicy
from engine.core.router import LeastLoadedPolicy, RequestView
from engine.sim import Simulation, Tab, Turn, chat_workload, load_profile
from tests.helpers import lane_view


def _lanes(profile="m2-flat", c=0.0):
    specs, _ = load_profile(profile, c)
    return {s.name: s.cost for s in specs}


def test_profile_predictions_match_the_published_figures():
    cost = _lanes("m2-flat")
    assert cost["gpu"].prefill_s(1085) == pytest.approx(1.0)
    assert cost["cpu"].prefill_s(69) == pytest.approx(1.0)
    assert cost["gpu"].decode_step_s(1, 1000) == pytest.approx(1 / 110)
    assert cost["cpu"].decode_tps(512) == pytest.approx(48)
    assert cost["cpu"].decode_tps(1280) == pytest.approx(41)
    assert cost["cpu"].decode_tps(2048) == pytest.approx(34)
    assert cost["cpu"].decode_step_s(4, 512) == pytest.approx(4 / 48)  # flat: B times
    batched = _lanes("m2-batched")
    assert batched["gpu"].decode_step_s(5, 0) == pytest.approx(1.6 / 110)
    contended = _lanes("m2-flat", 0.2)["gpu"]
    assert contended.step_s(1, 0, 0, contended=True) == pytest.approx(1.2 / 110)


def test_warm_follow_up_goes_to_cpu_while_gpu_is_busy():
    cost = _lanes()
    gpu = lane_view("gpu", cost["gpu"], batch_size=12, decode_batch=12, mean_context=900,
                remaining_tokens=12 * 150)
    cpu = lane_view("cpu", cost["cpu"])
    warm = RequestView("r1", prompt_tokens=845, cached_tokens=812, expected_output=150)
    placement = CostAwarePolicy().place(warm, [gpu, cpu])
    assert placement.lane == "cpu" and placement.decode_lane == "cpu"
    assert "812/845" in placement.reason
    assert placement.predicted_s["cpu"] < placement.predicted_s["gpu"]
    assert WarmPrefixPolicy().place(warm, [gpu, cpu]).lane == "cpu"


def test_cold_long_prompt_goes_to_gpu():
    cost = _lanes()
    gpu = lane_view("gpu", cost["gpu"], batch_size=2, decode_batch=2, mean_context=500,
                remaining_tokens=200)
    cpu = lane_view("cpu", cost["cpu"])
    cold = RequestView("r2", prompt_tokens=1500, cached_tokens=0, expected_output=150)
    assert CostAwarePolicy().place(cold, [gpu, cpu]).lane == "gpu"
    assert WarmPrefixPolicy().place(cold, [gpu, cpu]).lane == "gpu"


def test_idle_gpu_takes_everything():
    cost = _lanes()
    gpu, cpu = lane_view("gpu", cost["gpu"]), lane_view("cpu", cost["cpu"])
    warm = RequestView("r3", 845, 832, 150)
    assert CostAwarePolicy().place(warm, [gpu, cpu]).lane == "gpu"


def test_gpu_only_never_uses_the_cpu():
    specs, _ = load_profile("m2-flat")
    tabs = chat_workload(8, seed=3, think_mean_s=2.0)
    result = Simulation(specs, CostAwarePolicy(), mode="gpu-only").run(tabs)
    assert result.lane_busy_s["cpu"] == 0.0
    assert all(lane == "gpu" for r in result.requests for _, lane in r.lanes)
    assert len(result.requests) == sum(len(t.turns) for t in tabs)


def test_every_turn_completes_exactly_once_with_all_policies():
    tabs = chat_workload(10, seed=5, think_mean_s=1.0)
    for policy in (LeastLoadedPolicy(), WarmPrefixPolicy(), CostAwarePolicy()):
        specs, _ = load_profile("m2-batched", 0.2)
        result = Simulation(specs, policy, mode="hybrid").run(tabs)
        ids = [r.rid for r in result.requests]
        assert len(ids) == len(set(ids)) == sum(len(t.turns) for t in tabs)
        assert all(r.output == r.target for r in result.requests)


def test_prefill_on_gpu_then_decode_on_cpu_under_load():
    specs, _ = load_profile("m2-flat")
    tabs = chat_workload(24, seed=1, think_mean_s=3.0)
    result = Simulation(specs, CostAwarePolicy()).run(tabs)
    split = [r for r in result.requests if ("prefill", "gpu") in r.lanes
             and ("decode", "cpu") in r.lanes]
    assert split, "expected some requests to prefill on the GPU and decode on the CPU"
    assert result.lane_busy_s["cpu"] > 0.5 * result.lane_busy_s["gpu"]


def test_simulation_is_deterministic():
    tabs = chat_workload(6, seed=9)
    runs = [Simulation(load_profile("m2-flat")[0], CostAwarePolicy()).run(tabs)
            for _ in range(2)]
    assert [r.finished_at for r in runs[0].requests] == [r.finished_at for r in runs[1].requests]


def test_single_turn_timing_by_hand():
    # One tab, one turn, idle GPU: cold prefill of 180+8+100+8 = 296 tokens in
    # one 1024-token chunk (it samples the first token), then 50 decode steps
    # at 1/110 s, each reading one token (the first token is read by the first
    # of them, as the engine's pipelined steps do); the 50th is the stop token.
    specs, _ = load_profile("m2-flat")
    tabs = [Tab("t", 0.0, (Turn(100, 50, 0.0),))]
    result = Simulation(specs, CostAwarePolicy()).run(tabs)
    (r,) = result.requests
    assert r.output == 50 and r.prompt == 296
    assert r.first_token_at == pytest.approx(296 / 1085 + 1 / 110)
    assert r.finished_at == pytest.approx(296 / 1085 + 50 / 110)


def test_cost_model_refines_online():
    model = CostModel(prefill_tps=100, decode_points=[(0, 10)])
    for _ in range(40):
        model.observe(batch=1, context=100, prefill_tokens=0, seconds=0.2)  # truly 5 tok/s
    assert model.decode_step_s(1, 100) == pytest.approx(0.2, rel=0.02)
    for _ in range(40):
        model.observe(batch=0, context=0, prefill_tokens=100, seconds=2.0)
    assert model.prefill_s(100) == pytest.approx(2.0, rel=0.02)


def test_reconsider_moves_a_decode_only_after_the_policy_gap():
    # A crowded GPU next to an idle CPU: a long decode on the GPU should move,
    # unless it moved fewer than min_tokens_between_moves tokens ago; a lane
    # the mode no longer allows is left regardless.
    cost = _lanes()
    gpu = lane_view("gpu", cost["gpu"], batch_size=40, decode_batch=40, mean_context=900,
                remaining_tokens=40 * 200)
    cpu = lane_view("cpu", cost["cpu"])
    policy = CostAwarePolicy(min_tokens_between_moves=32)
    request = RequestView("r4", 800, 780, expected_output=200, output_tokens=60)
    move = policy.reconsider(request, "gpu", [gpu, cpu])
    assert move is not None and move.lane == "cpu"
    assert move.predicted_s["cpu"] < move.predicted_s["gpu"]
    recent = RequestView("r4", 800, 780, expected_output=200, output_tokens=60,
                         tokens_since_move=10)
    assert policy.reconsider(recent, "gpu", [gpu, cpu]) is None
    assert policy.reconsider(recent, "gpu", [cpu]).lane == "cpu"


def test_twin_lanes_that_only_take_turns_do_no_worse_than_one():
    # SIMULATION of this machine's stand-in: two equal lanes on the same cores
    # (each step twice as long while both run). Hybrid must notice that the
    # second lane does not pay and stay within noise of GPU-only.
    from engine.sim.profiles import SimLaneSpec

    def twins():
        cost = CostModel(prefill_tps=350, decode_points=[(0, 15)], batch_alpha=0.05,
                         contention=1.0)
        return [SimLaneSpec("gpu", "gpu", cost), SimLaneSpec("cpu", "cpu", cost.copy())]

    tabs = chat_workload(8, seed=2, think_mean_s=1.0)
    alone = Simulation(twins(), CostAwarePolicy(), mode="gpu-only").run(tabs)
    hybrid = Simulation(twins(), CostAwarePolicy(), mode="hybrid").run(tabs)
    assert hybrid.throughput >= 0.98 * alone.throughput
    assert hybrid.stat("completion")["mean"] <= 1.02 * alone.stat("completion")["mean"]


def test_a_lane_that_does_not_pay_is_drained():
    cost = CostModel(prefill_tps=300, decode_points=[(0, 15)], batch_alpha=0.1, contention=1.0)
    gpu = lane_view("gpu", cost, batch_size=4, decode_batch=4, mean_context=300,
                remaining_tokens=400)
    cpu = lane_view("cpu", cost.copy(), batch_size=1, decode_batch=1, mean_context=300,
                remaining_tokens=100)
    request = RequestView("r6", 300, 288, expected_output=100, output_tokens=40)
    move = CostAwarePolicy().reconsider(request, "cpu", [gpu, cpu])
    assert move is not None and move.lane == "gpu"
    # With no contention the same second lane pays and keeps its request.
    free = CostModel(prefill_tps=300, decode_points=[(0, 15)], batch_alpha=0.1)
    gpu0 = lane_view("gpu", free, batch_size=4, decode_batch=4, mean_context=300,
                 remaining_tokens=400)
    cpu0 = lane_view("cpu", free.copy(), batch_size=1, decode_batch=1, mean_context=300,
                 remaining_tokens=100)
    assert CostAwarePolicy().reconsider(request, "cpu", [gpu0, cpu0]) is None


def test_where_no_lane_pays_beside_the_other_the_faster_alone_keeps_its_decodes():
    """Two lanes on the same cores, each slowing the other more than it adds
    (as two real lanes on this machine learn, contention above 1): the
    faster lane alone carries the decodes; it is never drained into the
    slower one (it was, once both failed the pays test: 90% of a real run's
    tokens ended on a lane at half speed)."""
    fast = CostModel(prefill_tps=220, decode_points=[(0, 17)], batch_alpha=0.25,
                     contention=1.2)
    slow = CostModel(prefill_tps=250, decode_points=[(0, 6)], batch_alpha=0.0,
                     contention=0.45)
    gpu = lane_view("gpu", fast, batch_size=2, decode_batch=2, mean_context=300,
                remaining_tokens=60)
    cpu = lane_view("cpu", slow, batch_size=2, decode_batch=2, mean_context=300,
                remaining_tokens=60)
    request = RequestView("r7", 300, 288, expected_output=100, output_tokens=40)
    assert CostAwarePolicy().reconsider(request, "gpu", [gpu, cpu]) is None
    move = CostAwarePolicy().reconsider(request, "cpu", [gpu, cpu])
    assert move is not None and move.lane == "gpu"
    decode = CostAwarePolicy().place_decode(request, "cpu", [gpu, cpu])
    assert decode.lane == "gpu" and "CPU left idle" in decode.reason


def test_a_paced_lane_is_believed_as_slow_as_it_steps():
    """LaneConfig.min_step_s stands in for a slower device: its calibration
    is read as the paced steps would have measured it (CostModel.paced)."""
    fast = CostModel(prefill_tps=1000.0, decode_points=[(0, 50.0), (1000, 40.0)],
                     batch_alpha=0.2)
    paced = fast.paced(0.1, 96)  # every step at least 100 ms
    assert paced.decode_tps(0) == pytest.approx(10.0) and paced.decode_tps(1000) == 10.0
    # One stream (20 ms) and eight (20 ms x 2.4 = 48 ms) both last 100 ms: free.
    assert paced.batch_alpha == 0.0
    assert paced.prefill_tps == pytest.approx(960.0)  # 96 tokens in one 100 ms step
    assert fast.paced(0.0, 96) is fast
    # Paced at 30 ms: one stream 30 ms, eight 48 ms (the real steps outgrow the
    # pace): the factor is fitted there, not believed free.
    slower = fast.paced(0.03, 96)
    assert slower.decode_step_s(8, 0) == pytest.approx(0.048)
    assert slower.decode_step_s(1, 0) == pytest.approx(0.03)


def test_a_slowed_lane_is_believed_slower_in_every_phase():
    """LaneConfig.slowdown stands in for a device F times as fast: each step
    lasts 1/F of its real time, prefill and decode alike (CostModel.slowed)."""
    from engine.core.laneconfig import LaneConfig

    fast = CostModel(prefill_tps=900.0, decode_points=[(0, 30.0)], batch_alpha=0.2)
    slow = fast.slowed(3.0)
    assert slow.prefill_s(90) == pytest.approx(0.3) and slow.decode_tps(0) == 10.0
    assert slow.decode_step_s(4, 0) == pytest.approx(3 * fast.decode_step_s(4, 0))
    assert fast.slowed(1.0) is fast
    with pytest.raises(ValueError, match="slowdown"):
        LaneConfig(slowdown=0.5)


def test_where_no_lane_pays_the_gpu_keeps_its_decodes_unless_another_is_clearly_faster():
    """Two lanes on the same cores (neither pays beside the other): a CPU lane
    predicted a little faster alone does not take the GPU's decodes (the
    models are not that sure: a paced lane believed faster was 6% slower for
    real); one predicted much faster does."""
    def lanes(cpu_tps):
        gpu = CostModel(prefill_tps=300, decode_points=[(0, 20)], batch_alpha=0.3,
                        contention=1.0)
        cpu = CostModel(prefill_tps=300, decode_points=[(0, cpu_tps)], batch_alpha=0.3,
                        contention=1.0)
        return [lane_view("gpu", gpu, batch_size=2, decode_batch=2, mean_context=300,
                      remaining_tokens=60),
                lane_view("cpu", cpu, batch_size=1, decode_batch=1, mean_context=300,
                      remaining_tokens=30)]

    request = RequestView("r10", 300, 288, expected_output=100, output_tokens=40)
    slightly = CostAwarePolicy().place_decode(request, "cpu", lanes(21.0))
    assert slightly.lane == "gpu" and slightly.left_idle[0][0] == "cpu"
    assert CostAwarePolicy().place_decode(request, "gpu", lanes(30.0)).lane == "cpu"


def test_a_gpu_left_idle_beside_a_lane_that_holds_the_decodes_takes_them_back():
    """Once a CPU lane holds every decode, the GPU "does not pay" beside it;
    unless the CPU is predicted clearly faster, its decodes go back to the
    GPU (a paced lane kept them all, 6% slower than the GPU alone)."""
    gpu = CostModel(prefill_tps=300, decode_points=[(0, 20)], batch_alpha=0.3, contention=1.0)
    cpu = CostModel(prefill_tps=300, decode_points=[(0, 21)], batch_alpha=0.3, contention=1.0)
    views = [lane_view("gpu", gpu), lane_view("cpu", cpu, batch_size=3, decode_batch=3,
                                       mean_context=300, remaining_tokens=90)]
    request = RequestView("r11", 300, 288, expected_output=100, output_tokens=40)
    move = CostAwarePolicy().reconsider(request, "cpu", views)
    assert move is not None and move.lane == "gpu"
    fast = CostModel(prefill_tps=300, decode_points=[(0, 40)], batch_alpha=0.3, contention=1.0)
    views[1] = lane_view("cpu", fast, batch_size=3, decode_batch=3, mean_context=300,
                     remaining_tokens=90)
    assert CostAwarePolicy().reconsider(request, "cpu", views) is None
