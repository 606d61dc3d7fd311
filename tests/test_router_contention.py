"""The cost-aware router and contention between lanes, on SIMULATED lanes
(virtual time, cost profiles), hand-checked: contention learned from steps
run side by side (and beside a prefill), charged only while the other lanes
stay busy, and a guess (not learned, not stored) kept from moving work off a
busy GPU for a small gain."""

import pytest

from engine.core.costmodel import CostModel
from engine.core.policies import CostAwarePolicy
from engine.core.router import RequestView
from tests.helpers import lane_view


def test_cost_model_learns_contention_from_steps_run_alongside_other_lanes():
    model = CostModel(prefill_tps=100, decode_points=[(0, 10)])  # 0.1 s a step alone
    for _ in range(40):
        model.observe(batch=1, context=100, prefill_tokens=0, seconds=0.1)
    for _ in range(200):  # with another lane running, steps take 1.5x
        model.observe(batch=1, context=100, prefill_tokens=0, seconds=0.15, contended=True)
    assert model.contention == pytest.approx(0.5, rel=0.02)
    assert model.decode_step_s(1, 100) == pytest.approx(0.1, rel=0.02)  # base kept
    assert model.step_s(1, 100, 0, contended=True) == pytest.approx(0.15, rel=0.02)
    for _ in range(200):  # contended steps as fast as quiet ones: no contention
        model.observe(batch=1, context=100, prefill_tokens=0, seconds=0.1, contended=True)
    assert model.contention < 0.01


def test_contention_beside_a_prefill_is_learned_apart_and_fast():
    """Beside another lane's prefill (it computes flat out) a step slows
    more than beside its decodes; the first contended steps are averaged,
    not pulled from the 0 the model started at."""
    model = CostModel(prefill_tps=100, decode_points=[(0, 10)])  # 0.1 s a step alone
    for _ in range(5):
        model.observe(batch=1, context=100, prefill_tokens=0, seconds=0.13, contended=True)
        model.observe(batch=1, context=100, prefill_tokens=0, seconds=0.2, contended=True,
                      beside_prefill=True)
    assert model.contention == pytest.approx(0.3) and model.contended_samples == 5
    assert model.prefill_contention == pytest.approx(1.0)
    assert not model.contention_known and not model.prefill_contention_known
    for _ in range(40):
        model.observe(batch=1, context=100, prefill_tokens=0, seconds=0.2, contended=True,
                      beside_prefill=True)
    assert model.prefill_contention_known and model.contention == pytest.approx(0.3)


def test_a_prefill_beside_busy_decodes_pays_only_if_their_prefill_contention_allows():
    """An idle lane as fast as the GPU at prefill (a paced CPU lane) would
    prefill for the GPU's decode: worth it while the GPU's decodes lose
    little beside it, not where they lose as much as the prefill saves."""
    def lanes(beside_prefill):
        gpu_cost = CostModel(prefill_tps=300, decode_points=[(0, 20)], batch_alpha=0.3,
                             contention=0.3, contended_samples=40,
                             prefill_contention=beside_prefill, prefill_contended_samples=40)
        cpu_cost = CostModel(prefill_tps=300, decode_points=[(0, 12)], batch_alpha=0.0,
                             contention=0.3, contended_samples=40)
        gpu = lane_view("gpu", gpu_cost, batch_size=3, decode_batch=3, mean_context=300,
                    remaining_tokens=3 * 30)
        return [gpu, lane_view("cpu", cpu_cost)]

    cold = RequestView("r9", prompt_tokens=320, cached_tokens=0, expected_output=32)
    assert CostAwarePolicy().place(cold, lanes(0.1)).lane == "cpu"
    placement = CostAwarePolicy().place(cold, lanes(1.2))
    assert placement.lane == placement.decode_lane == "gpu"


def test_learned_contention_keeps_a_second_lane_idle_when_it_does_not_pay():
    # Two equal lanes that take turns on shared cores (contention 1.0: each
    # step twice as long while both run) gain nothing from spreading; with
    # contention unknown (0.0) spreading looks free.
    def lanes(contention):
        gpu_cost = CostModel(prefill_tps=300, decode_points=[(0, 15)], batch_alpha=0.1,
                             contention=contention)
        cpu_cost = gpu_cost.copy()
        gpu = lane_view("gpu", gpu_cost, batch_size=4, decode_batch=4, mean_context=300,
                    remaining_tokens=4 * 100)
        return [gpu, lane_view("cpu", cpu_cost)]

    request = RequestView("r5", prompt_tokens=300, cached_tokens=288, expected_output=100)
    assert CostAwarePolicy().place(request, lanes(0.0)).lane == "cpu"
    placement = CostAwarePolicy().place(request, lanes(1.0))
    assert placement.lane == placement.decode_lane == "gpu"
    assert "CPU left idle" in placement.reason and "contention 1.0" in placement.reason
    assert placement.left_idle == (("cpu", "it would slow GPU more than it adds "
                                           "(contention 1.0)"),)  # what the dock reads


def test_a_lane_that_never_ran_beside_the_other_is_believed_as_contended_as_it():
    """A CPU lane the router keeps idle learns no contention of its own (it
    starts at 0 every run); the GPU's learned one stands for it (the shared
    cores or bandwidth slow both ways). It was trusted at 0: on two real
    lanes, prefills moved to the idle lane and hybrid lost 8%."""
    gpu_cost = CostModel(prefill_tps=300, decode_points=[(0, 15)], batch_alpha=0.1,
                         contention=1.0)
    gpu_cost.contended_samples = 40  # learned
    gpu = lane_view("gpu", gpu_cost, batch_size=4, decode_batch=4, mean_context=300,
                remaining_tokens=4 * 100)
    cpu = lane_view("cpu", CostModel(prefill_tps=300, decode_points=[(0, 15)], batch_alpha=0.1))
    request = RequestView("r8", prompt_tokens=300, cached_tokens=288, expected_output=100)
    placement = CostAwarePolicy().place(request, [gpu, cpu])
    assert placement.lane == placement.decode_lane == "gpu"
    assert "CPU left idle" in placement.reason and "contention 1.0" in placement.reason
    # Its own learned (or stored) value is trusted: 0 beside a GPU it does not slow.
    cpu.cost.start_contention(0.0)
    gpu_cost.contention = 0.0
    assert CostAwarePolicy().place(request, [gpu, cpu]).lane == "cpu"


def test_contention_is_charged_only_while_the_other_lane_stays_busy():
    """A GPU lane decoding 8 streams, a CPU lane busy with a short prefill
    the router put there: the GPU's next 64 steps are slowed only while that
    prefill lasts. Charging all of them (the learned contention 0.81 times
    64 steps) once made the GPU look slower than the CPU lane and drew its
    decodes there ("decode 64 tokens: GPU 16.2 s vs CPU 11.6 s"; the real
    sweep lost 22%)."""
    gpu_cost = CostModel(prefill_tps=900, decode_points=[(0, 9.4)], batch_alpha=0.05,
                         contention=0.81, contended_samples=40,
                         prefill_contention=0.81, prefill_contended_samples=40)
    cpu_cost = CostModel(prefill_tps=900, decode_points=[(0, 4.7)], batch_alpha=0.0,
                         contention=0.9, contended_samples=40)
    gpu = lane_view("gpu", gpu_cost, batch_size=8, decode_batch=8, mean_context=300,
                remaining_tokens=8 * 64)
    prefilling = lane_view("cpu", cpu_cost, batch_size=1, pending_prompt_tokens=90)
    policy = CostAwarePolicy()
    request = RequestView("r1", prompt_tokens=300, cached_tokens=0, expected_output=64,
                          output_tokens=1)
    alone = 64 * gpu_cost.decode_step_s(9, 300)
    short = cpu_cost.prefill_s(90)  # the CPU lane's prefill: ~0.1 s
    own, _ = policy._decode(gpu, [gpu, prefilling], 64, 300)
    # For `short` seconds the GPU runs at 1 / 1.81 of its speed, then alone.
    assert own == pytest.approx(alone + short * (1 - 1 / 1.81), rel=1e-6)
    assert own < alone * 1.05  # not 1.81x
    assert policy.place_decode(request, "gpu", [gpu, prefilling]).lane == "gpu"
    # The same lane busy for longer than the whole decode charges every step.
    decoding = lane_view("cpu", cpu_cost, batch_size=2, decode_batch=2, mean_context=300,
                     remaining_tokens=2 * 400)
    own, _ = policy._decode(gpu, [gpu, decoding], 64, 300)
    assert own == pytest.approx(alone * 1.81, rel=1e-6)
    # Prompts queued there count by their prefill (the plan that sent them may
    # decode them elsewhere): a queued prefill once charged every step.
    queued = lane_view("cpu", cpu_cost, batch_size=1, queue_depth=2, pending_prompt_tokens=270)
    own, _ = policy._decode(gpu, [gpu, queued], 64, 300)
    assert own == pytest.approx(alone + cpu_cost.prefill_s(270) * (1 - 1 / 1.81), rel=1e-6)
    assert policy.place_decode(request, "gpu", [gpu, queued]).lane == "gpu"
    # A full batch with requests waiting stays busy the longer.
    full = lane_view("cpu", cpu_cost, batch_size=2, decode_batch=2, max_batch=2, queue_depth=2,
                 mean_context=300, remaining_tokens=2 * 4)
    per_stream = 4 * cpu_cost.decode_step_s(2, 300)
    own, _ = policy._decode(gpu, [gpu, full], 64, 300)
    assert own == pytest.approx(alone + 2 * per_stream * (1 - 1 / 1.81), rel=1e-6)


def test_a_small_gain_off_a_busy_gpu_waits_until_their_contention_is_known():
    """A warm follow-up the CPU lane would prefill for the GPU's decode, for
    a predicted 1%: while the contention between the lanes is a guess (0,
    nothing learned or stored), the whole request stays on the GPU and the
    reason says why; once known, the predictions are trusted. A larger gain
    (a faster CPU lane) is taken at once."""
    def lanes(known, cpu_rate):
        k = dict(contention_stored=known, prefill_contention_stored=known)
        gpu = lane_view("gpu", CostModel(prefill_tps=2000, decode_points=[(0, 20)],
                                     batch_alpha=0.3, **k),
                    batch_size=6, decode_batch=6, mean_context=300, remaining_tokens=6 * 64)
        cpu = lane_view("cpu", CostModel(prefill_tps=300, decode_points=[(0, cpu_rate)],
                                     batch_alpha=0.3, **k))
        return [gpu, cpu]

    warm = RequestView("r1", prompt_tokens=300, cached_tokens=290, expected_output=64)
    guess = CostAwarePolicy().place(warm, lanes(False, 5))
    assert (guess.lane, guess.decode_lane) == ("gpu", "gpu")
    assert "not known yet" in guess.reason
    assert [name for name, _ in guess.left_idle] == ["cpu"]  # one entry a lane
    trusted = CostAwarePolicy().place(warm, lanes(True, 5))
    assert (trusted.lane, trusted.decode_lane) == ("cpu", "gpu")
    assert "not known yet" not in trusted.reason
    faster = CostAwarePolicy().place(warm, lanes(False, 12))
    assert (faster.lane, faster.decode_lane) == ("cpu", "cpu")
