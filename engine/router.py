"""Where a request runs: plain Python over plain data, testable without MLX.

The engine hands the router a snapshot of each lane (`LaneView`) and the
request (`RequestView`); a policy returns a `Placement` with a reason a person
can read. Modes restrict which lanes a policy may choose.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

MODES = ("gpu-only", "hybrid", "cpu-only")


@dataclass(slots=True, frozen=True)
class LaneView:
    name: str
    device: str  # "gpu" or "cpu"
    queue_depth: int
    batch_size: int
    pending_prompt_tokens: int


@dataclass(slots=True, frozen=True)
class RequestView:
    request_id: str
    prompt_tokens: int
    cached_tokens: int

    @property
    def uncached_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


@dataclass(slots=True, frozen=True)
class Placement:
    lane: str
    reason: str
    predicted_s: dict[str, float] = field(default_factory=dict)


class Policy(Protocol):
    name: str

    def place(self, request: RequestView, lanes: list[LaneView]) -> Placement: ...


def eligible_lanes(mode: str, lanes: list[LaneView]) -> list[LaneView]:
    """Lanes a mode allows; falls back to every lane when none match (a
    machine without a GPU runs `gpu-only` on its CPU lanes)."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    if mode == "gpu-only":
        chosen = [lane for lane in lanes if lane.device == "gpu"]
    elif mode == "cpu-only":
        chosen = [lane for lane in lanes if lane.device == "cpu"]
    else:
        chosen = list(lanes)
    return chosen or list(lanes)


class LeastLoadedPolicy:
    """Send each request to the lane with the least queued work.

    Work is counted as prompt tokens still to prefill plus a token per running
    request; ties go to the GPU, then to the first lane.
    """

    name = "least-loaded"

    def place(self, request: RequestView, lanes: list[LaneView]) -> Placement:
        if not lanes:
            raise ValueError("no lanes to place on")
        if len(lanes) == 1:
            lane = lanes[0]
            return Placement(lane.name, f"only lane ({lane.device}); "
                             f"{request.cached_tokens}/{request.prompt_tokens} prompt tokens cached")

        def load(lane: LaneView) -> tuple[int, int]:
            return (lane.pending_prompt_tokens + lane.batch_size + lane.queue_depth,
                    0 if lane.device == "gpu" else 1)

        best = min(lanes, key=load)
        loads = ", ".join(f"{lane.name} {load(lane)[0]}" for lane in lanes)
        return Placement(best.name, f"least loaded (queued work: {loads})")
