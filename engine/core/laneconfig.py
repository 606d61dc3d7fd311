"""A lane to build (`LaneSpec`), its tuning (`LaneConfig`, validated), what
the engine says of a running lane (`LaneInfo`) and the counters it publishes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .step import StepPlan

# A prompt's final chunk longer than this is run as (all but last, last).
SPLIT_LAST_TOKEN_ABOVE = 64
# The fewest prompt tokens a time-bounded prefill step takes (LaneConfig.prefill_step_s).
MIN_PREFILL_CHUNK = 128


class StepGate(Protocol):
    """Lockstep: who says when a lane's steps start and end (engine/sim/lockstep.py
    runs real lanes in virtual time with one). Called on the lane's thread."""

    def begin(self, lane: str) -> None:
        """Block until the lane may plan its next step."""

    def end(self, lane: str, plan: "StepPlan", measured_s: float) -> float:
        """Block until the step may end; the seconds the lane records for it."""

    def idle(self, lane: str) -> None:
        """The lane has nothing to do and waits for work."""


DRAFT_MODES = ("off", "lookup", "model")


@dataclass(slots=True)
class LaneConfig:
    """Tuning of one lane. Validated on construction."""

    max_batch: int = 64  # slots; KV bytes bound admission too (engine/core/scheduler.py)
    prefill_chunk: int = 1024  # tokens per step while nothing decodes
    prefill_chunk_busy: int = 128  # tokens per step while requests decode
    # A prefill step while nothing decodes lasts about this long at the
    # lane's prefill rate (at least MIN_PREFILL_CHUNK tokens, at most
    # prefill_chunk): Stop acts between steps. 0 turns the bound off.
    prefill_step_s: float = 1.0
    clear_cache_every: int = 256  # steps between mx.clear_cache()
    kv_budget_bytes: int | None = None  # a cap below the memory plan's KV budget
    # A lone request decodes on its own caches, without a batch cache's mask
    # (engine/runtime/batch.py); False keeps it on a batch cache of one.
    solo_decode: bool = True
    # Whole cold prompts planned in one step are prefilled in one batched
    # forward, in groups of similar length (engine/runtime/prefill.py).
    batch_prefill: bool = True
    # Pacing, for tests and demos: a step lasts at least `min_step_s` (a tiny
    # model streams at human speed), or a gate decides when steps start and end.
    min_step_s: float = 0.0
    # A slower device, for what-if benchmarks: each step lasts `slowdown`
    # times what it took (prefill and decode alike; the lane sleeps the rest).
    slowdown: float = 1.0
    gate: StepGate | None = None
    # Drafts (issue 32): "lookup" lets requests propose tokens from their
    # prompt, answer and predicted output, "model" from the engine's draft
    # model, and verifies them in the batch's forward where that pays
    # (engine/core/drafts.py, engine/runtime/verify.py); "off" never does.
    drafts: str = "off"

    def __post_init__(self):
        if self.max_batch < 1 or self.prefill_chunk < 1 or self.prefill_chunk_busy < 1:
            raise ValueError("max_batch and prefill chunk sizes must be >= 1")
        if self.kv_budget_bytes is not None and self.kv_budget_bytes < 0:
            raise ValueError("kv_budget_bytes must be >= 0")
        if not self.min_step_s >= 0:
            raise ValueError("min_step_s must be >= 0")
        if not self.slowdown >= 1:
            raise ValueError("slowdown must be >= 1")
        if not self.prefill_step_s >= 0:
            raise ValueError("prefill_step_s must be >= 0")
        if self.drafts not in DRAFT_MODES:
            raise ValueError(f"drafts must be one of {', '.join(DRAFT_MODES)}, "
                             f"not {self.drafts!r}")


class SchedulerState:
    """What a lane (local or remote) says of itself, read from its scheduler:
    the engine, the router, the dock and tests read these off either kind."""

    scheduler: object

    @property
    def failed(self) -> str | None:
        return self.scheduler.failed

    @property
    def warming_up(self) -> bool:
        """Still starting (warming up, calibrating, or a remote's probe): routed
        around while another lane is ready; requests queue for it when none is."""
        return self.scheduler.warming_up

    @property
    def cost(self):
        return self.scheduler.cost

    @property
    def is_idle(self) -> bool:
        return self.scheduler.is_idle

    @property
    def batch_size(self) -> int:
        return self.scheduler.batch_size

    @property
    def queue_depth(self) -> int:
        return self.scheduler.queue_depth


class LaneStats:
    """Counters read by the engine's sampler thread (plain numbers, no lock)."""

    def __init__(self):
        self.busy_s = 0.0
        self.host_s = 0.0  # of busy_s: the lane thread's own work (plan, graph, emit)
        self.wait_s = 0.0  # of busy_s: waiting for the device's tokens
        self.tokens = 0  # prompt + output tokens processed
        self.output_tokens = 0
        self.steps = 0
        self.drafted = 0  # draft tokens verified (issue 32)
        self.accepted_drafts = 0  # of those, accepted


@dataclass(slots=True, frozen=True)
class LaneSpec:
    """A lane to build: its name, device ('cpu'/'gpu') and weight format.

    weight_format 'auto' lets the memory plan choose: the weights as loaded,
    shared between lanes, or on the CPU a dense float32 copy where it fits and
    a probe measures it faster (engine/runtime/placement.py)."""

    name: str
    device: str = "cpu"
    weight_format: str = "auto"
    config: LaneConfig | None = None
    acts_as: str | None = None  # the role the router sees; tests run a CPU lane as "gpu"

    @property
    def kind(self) -> str:
        return self.acts_as or self.device


@dataclass(slots=True, frozen=True)
class LaneInfo:
    """A running lane as an app shows it (`Engine.lane_info()`)."""

    name: str
    device: str  # 'cpu' / 'gpu'
    kind: str  # the role the router sees
    failed: str | None = None  # why it stopped, if it failed
    phase: str = "serving"  # starting, restarting, warming up, calibrating, serving, failed
    restarting: str | None = None  # a lane restarting after a failure: that failure
