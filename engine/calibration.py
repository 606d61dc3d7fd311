"""A lane's start-up calibration: time a prefill and a few decode steps."""

from __future__ import annotations

import time

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import make_prompt_cache

from .costmodel import CostModel


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
    step = {}
    for batch in (1, 4):
        cache = make_prompt_cache(model)
        mx.eval(model(mx.array([[5] * 32] * batch), cache=cache))
        steps, t = 0, time.perf_counter()
        while steps < 2 or (steps < 8 and time.perf_counter() - started < budget_s):
            mx.eval(model(mx.array([[5]] * batch), cache=cache))
            steps += 1
        step[batch] = (time.perf_counter() - t) / steps
    alpha = min(1.0, max(0.0, (step[4] / step[1] - 1.0) / 3.0))
    cost = CostModel(prefill_tps=prefill_tps, decode_points=[(0, 1.0 / step[1])],
                     batch_alpha=alpha)
    return cost, time.perf_counter() - started


def kv_dtype(model: nn.Module) -> mx.Dtype:
    """The dtype the model writes into its KV cache, found by a one-token probe."""
    cache = make_prompt_cache(model)
    model(mx.array([[0]]), cache=cache)
    return cache[0].keys.dtype
