"""A lane's tuning (validated) and the counters it publishes."""

from __future__ import annotations

from dataclasses import dataclass


# A prompt's final chunk longer than this is run as (all but last, last).
SPLIT_LAST_TOKEN_ABOVE = 64


@dataclass(slots=True)
class LaneConfig:
    """Tuning of one lane. Validated on construction."""

    max_batch: int = 64  # slots; KV bytes bound admission too (engine/scheduler.py)
    prefill_chunk: int = 1024  # tokens per step while nothing decodes
    prefill_chunk_busy: int = 128  # tokens per step while requests decode
    clear_cache_every: int = 256  # steps between mx.clear_cache()
    kv_budget_bytes: int | None = None  # a cap below the memory plan's KV budget

    def __post_init__(self):
        if self.max_batch < 1 or self.prefill_chunk < 1 or self.prefill_chunk_busy < 1:
            raise ValueError("max_batch and prefill chunk sizes must be >= 1")
        if self.kv_budget_bytes is not None and self.kv_budget_bytes < 0:
            raise ValueError("kv_budget_bytes must be >= 0")


class LaneStats:
    """Counters read by the engine's sampler thread (plain numbers, no lock)."""

    def __init__(self):
        self.busy_s = 0.0
        self.tokens = 0  # prompt + output tokens processed
        self.output_tokens = 0
        self.steps = 0
