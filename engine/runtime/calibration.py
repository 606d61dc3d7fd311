"""A lane's start-up calibration: time a prefill and a few decode steps."""

from __future__ import annotations

import threading
import time

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import make_prompt_cache

from ..core.costmodel import CostModel



def calibrate(model: nn.Module, budget_s: float = 3.0) -> tuple[CostModel, float]:
    """A cost model from a 96-token prefill and decode steps at batch 1 and 4,
    bounded to about `budget_s`; returns it with the seconds it took."""
    started = time.perf_counter()
    prompt = mx.array([[(7 * i) % 100 + 3 for i in range(96)]])
    for _ in range(2):  # warm-up: first calls pay for allocation
        mx.eval(model(prompt, cache=make_prompt_cache(model)))
    t = time.perf_counter()
    mx.eval(model(prompt, cache=make_prompt_cache(model)))
    prefill_tps = prompt.shape[1] / max(time.perf_counter() - t, 1e-6)
    step = {batch: decode_step_s(model, batch, max_steps=8,
                                 deadline=started + budget_s) for batch in (1, 4)}
    alpha = min(1.0, max(0.0, (step[4] / step[1] - 1.0) / 3.0))
    cost = CostModel(prefill_tps=prefill_tps, decode_points=[(0, 1.0 / step[1])],
                     batch_alpha=alpha)
    return cost, time.perf_counter() - started


def decode_step_s(model: nn.Module, batch: int = 1, max_steps: int = 8,
                  deadline: float | None = None) -> float:
    """Mean time of decode steps at `batch` over a 32-token context: at least
    2 steps, at most `max_steps`, stopping at `deadline` (perf_counter)."""
    cache = make_prompt_cache(model)
    mx.eval(model(mx.array([[5] * 32] * batch), cache=cache))
    steps, t = 0, time.perf_counter()
    while steps < 2 or (steps < max_steps and (deadline is None or time.perf_counter() < deadline)):
        mx.eval(model(mx.array([[5]] * batch), cache=cache))
        steps += 1
    return (time.perf_counter() - t) / steps


def contention(model: nn.Module, cost: CostModel, seconds: float = 0.6) -> float:
    """Run one-stream decode steps for about `seconds` while the other lanes
    do the same (the caller synchronises them): how much longer a step takes
    than when this lane ran alone at calibration."""
    contended = decode_step_s(model, 1, max_steps=1_000,
                              deadline=time.perf_counter() + seconds)
    return min(max(contended * cost.decode_tps(0) - 1.0, 0.0), cost.max_contention)


def start_up(model: nn.Module, calibrated: threading.Event,
             probe: threading.Barrier | None,
             probe_until: float | None = None) -> tuple[CostModel, float]:
    """A lane's start-up, on its thread: calibrate alone and set `calibrated`
    (the engine then starts the next lane); with `probe`, wait until every lane
    has calibrated, then measure contention with all decoding at once.
    Returns the cost model and the seconds spent calibrating and probing."""
    try:
        cost, seconds = calibrate(model)
    except BaseException:
        if probe is not None:
            probe.abort()  # the others must not wait for this lane
        raise
    finally:
        calibrated.set()
    if probe is not None:
        try:
            # A lane that has calibrated waits for the others only until the
            # engine's start-up deadline (`probe_until`, monotonic): then it serves,
            # and contention is learned online instead.
            left = 120.0 if probe_until is None else max(0.0, probe_until - time.monotonic())
            probe.wait(timeout=left)
        except threading.BrokenBarrierError:
            return cost, seconds
        started = time.perf_counter()
        cost.contention = contention(model, cost)
        seconds += time.perf_counter() - started
    return cost, seconds


def kv_dtype(model: nn.Module) -> mx.Dtype:
    """The dtype the model writes into its KV cache, found by a one-token probe."""
    from .cachekinds import arrays_of, first_attention

    cache = make_prompt_cache(model)
    model(mx.array([[0]]), cache=cache)
    attention = first_attention(cache)
    return attention.keys.dtype if attention is not None else arrays_of(cache)[0].dtype
