"""What a lane's scheduler plans for one step and what running it gave back.

Plain data: the scheduler (engine/core/scheduler.py) fills a `StepPlan`, a runner
(engine/runtime/runner.py on a device, engine/sim/runner.py in virtual time) executes
it and returns a `StepResult`, and the scheduler commits that into a
`StepOutcome` the lane turns into events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .prefix_trie import PrefixMatch
from .request import Request


@dataclass(slots=True, frozen=True)
class PrefillChunk:
    """Prompt tokens [start, start + size) of `request` through the model."""

    request: Request
    start: int
    size: int

    @property
    def is_last(self) -> bool:
        return self.start + self.size >= self.request.num_prompt


@dataclass(slots=True, frozen=True)
class Admission:
    """A request that starts prefilling, on top of its cached prefix."""

    request: Request
    prefix: PrefixMatch


@dataclass(slots=True)
class StepPlan:
    """One step, in the order the runner applies it."""

    cancelled: list[Request] = field(default_factory=list)  # leave; their KV to the prefix cache
    moves: list[tuple[Request, str]] = field(default_factory=list)  # hand to another lane
    admitted: list[Admission] = field(default_factory=list)  # start prefilling
    joins: list[Request] = field(default_factory=list)  # join the decode batch first
    decode: list[Request] = field(default_factory=list)  # the decode batch, in order
    prefill: list[PrefillChunk] = field(default_factory=list)
    events: list[object] = field(default_factory=list)  # routing decisions made while planning
    contended: bool = False  # another lane was busy when the step started (a remote too)
    # Another local lane was busy: what slows a simulated lane (engine/sim/);
    # a remote lane on another machine slows none, but one on this machine does,
    # so real lanes learn from `contended` what the remote's work costs them.
    local_contended: bool = False
    beside_prefill: bool = False  # and another lane was prefilling (CostModel.prefill_contention)
    context: float = 0.0  # mean context of the decode rows (for the cost model)

    @property
    def has_work(self) -> bool:
        return bool(self.decode or self.prefill)

    @property
    def prefill_tokens(self) -> int:
        return sum(chunk.size for chunk in self.prefill)


@dataclass(slots=True)
class StepResult:
    """What running a plan gave: one token per decode row, the step's time,
    and the state of each request moved away (opaque to the scheduler).
    `wait_s` is the part of `seconds` the lane thread spent waiting for the
    device to hand tokens back; the rest is host work (building the graph,
    sampling set-up, cache bookkeeping). Steps are pipelined, so a step whose
    wait is near zero kept the device waiting on the host instead."""

    tokens: list[int]
    seconds: float
    handoffs: dict[str, Any] = field(default_factory=dict)  # request id -> runner state
    wait_s: float = 0.0
    # Per decoded token (aligned with `tokens`): (logprob, ((id, logprob), ...))
    # for requests that asked for logprobs, else None. Empty: none asked.
    logprobs: list = field(default_factory=list)
    # Row index -> the tokens it wrote after its token in `tokens`, in order
    # (accepted drafts: engine/runtime/verify.py).
    extra: dict = field(default_factory=dict)
    extra_logprobs: dict = field(default_factory=dict)  # row -> their logprobs, aligned
    verified: int = 0  # proposed positions this step verified (0: a plain step)
    # Requests whose own KV failed this step (runner.py: KV from the prefix
    # cache that the model could not use): their state is gone, each ends
    # with its `failure`; the lane serves on.
    failed: list = field(default_factory=list)


@dataclass(slots=True)
class StepOutcome:
    """A committed step: tokens per request (with the reason each finished,
    if it did) and the requests that finished."""

    # (request, token, the reason it finished or None, its logprobs or None,
    # whether it was an accepted draft)
    tokens: list[tuple[Request, int, str | None, tuple | None, bool]] = field(
        default_factory=list)
    finished: list[tuple[Request, str]] = field(default_factory=list)
