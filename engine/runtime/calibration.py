"""A lane's start-up: warm up through the real decode path, then time it.

Warm-up runs what serving runs (a chunked prefill into the model's own
caches, the decode batch with a lone request on its own caches, then two rows
on batch caches with a mask, greedy and sampled rows) so that a GPU backend
compiles its kernels here (MLX's CUDA build JIT-compiles at first use: tens
of seconds on a fresh machine) and not inside a user's first request, and so
that calibration times steady-state steps only. Calibration then times a
prefill and decode steps at batch 1 and 4, bounded to a few seconds.

Contention between lanes is not probed at start-up (that would park every
lane until the slowest is ready): a lane starts from the factor the last run
on this machine stored (engine/runtime/coststore.py), or none, and learns it
online from contended steps (engine/core/costmodel.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import make_prompt_cache

from ..core.costmodel import CostModel
from ..core.params import SamplingParams
from ..core.request import Request
from .batch import DecodeBatch
from .sampling import TokenSampler

PROMPT = [(7 * i) % 100 + 3 for i in range(96)]


class StartCancelled(Exception):
    """The engine closed while the lane was starting."""


def _never() -> bool:
    return False


def _prefilled(model: nn.Module, ids: list[int], chunk: int = 64):
    """Caches holding `ids` (prefilled in chunks, as serving does) and the
    logits of the last position."""
    caches = make_prompt_cache(model)
    logits = None
    for start in range(0, len(ids), chunk):
        logits = model(mx.array([ids[start : start + chunk]]), cache=caches)[:, -1, :]
    return caches, logits


def _join(batch: DecodeBatch, model: nn.Module, ids: list[int], params: SamplingParams) -> None:
    caches, logits = _prefilled(model, ids)
    sampler = TokenSampler(params)
    first = sampler.sample(logits, None)
    mx.eval(first, [c.state for c in caches])
    batch.add(Request(list(ids), params), sampler, caches, first)


@dataclass(frozen=True, slots=True)
class WarmUp:
    seconds: float
    prefill_tps: float  # of its second prompt (its first paid for allocation, or a JIT)


def warm_up(model: nn.Module, solo: bool = True, steps: int = 3,
            cancelled=_never) -> WarmUp:
    """One pass through every kernel serving uses: how long it took, and the
    prefill rate it saw (a lane without a cost model sizes its first prefill
    steps by it). Raises StartCancelled between its parts once `cancelled()`."""
    started = time.perf_counter()
    batch = DecodeBatch(model, solo)

    def run(n: int) -> None:
        for _ in range(n):
            if cancelled():
                raise StartCancelled
            batch.step().tolist()

    _join(batch, model, PROMPT, SamplingParams())
    run(steps)  # a lone request (its own caches: no mask)
    t = time.perf_counter()
    _join(batch, model, PROMPT[:64],
          SamplingParams(temperature=0.7, top_p=0.9, top_k=40, min_p=0.05, seed=0))
    prefill_tps = 64 / max(time.perf_counter() - t, 1e-6)
    run(steps)  # two rows of different lengths: batch caches, a mask, sampling
    batch.keep([1])  # back to one
    run(steps)
    batch.keep([])
    return WarmUp(time.perf_counter() - started, prefill_tps)


def decode_step_s(model: nn.Module, batch_size: int = 1, max_steps: int = 8,
                  deadline: float | None = None, solo: bool = True,
                  cancelled=_never) -> float:
    """Mean time of decode steps of the lane's decode batch at `batch_size`
    rows over 32-token prompts: at least 2 steps, at most `max_steps`,
    stopping at `deadline` (perf_counter)."""
    batch = DecodeBatch(model, solo)
    for i in range(batch_size):
        _join(batch, model, [5 + i] * 32, SamplingParams())
    batch.step().tolist()  # the pipeline's first step
    steps, t = 0, time.perf_counter()
    while steps < 2 or (steps < max_steps and (deadline is None or time.perf_counter() < deadline)):
        if cancelled():
            raise StartCancelled
        batch.step().tolist()
        steps += 1
    seconds = (time.perf_counter() - t) / steps
    batch.keep([])
    return seconds


def calibrate(model: nn.Module, budget_s: float = 3.0, solo: bool = True,
              cancelled=_never, pacing=None) -> CostModel:
    """A cost model from a 96-token prefill and decode steps at batch 1 and 2,
    bounded to about `budget_s`.

    Only shapes `warm_up` ran are timed (prefill chunks of 64 and 32 tokens,
    one row on its own caches, two rows on batch caches): MLX's CUDA build
    compiles kernels per configuration at first use, so a new shape here
    would time a compilation (on the H200 a calibration with a 96-token chunk
    and a batch of 4 was still running after 117 s; benchmarks/RESULTS.md).

    `pacing`: the lane's LaneConfig; a lane it slows (`slowdown`,
    `min_step_s`) is believed as slow as it steps (CostModel.slowed, .paced)."""
    started = time.perf_counter()
    t = time.perf_counter()
    caches, logits = _prefilled(model, PROMPT)
    mx.eval(logits)
    prefill_tps = len(PROMPT) / max(time.perf_counter() - t, 1e-6)
    step = {b: decode_step_s(model, b, max_steps=8, deadline=started + budget_s, solo=solo,
                             cancelled=cancelled)
            for b in (1, 2)}
    alpha = min(1.0, max(0.0, step[2] / step[1] - 1.0))
    cost = CostModel(prefill_tps=prefill_tps, decode_points=[(0, 1.0 / step[1])],
                     batch_alpha=alpha)
    if pacing is not None:
        cost = cost.slowed(pacing.slowdown).paced(pacing.min_step_s, len(PROMPT))
    return cost


def kv_dtype(model: nn.Module) -> mx.Dtype:
    """The dtype the model writes into its KV cache, found by a one-token probe."""
    from .cachekinds import arrays_of, first_attention

    cache = make_prompt_cache(model)
    model(mx.array([[0]]), cache=cache)
    attention = first_attention(cache)
    return attention.keys.dtype if attention is not None else arrays_of(cache)[0].dtype
