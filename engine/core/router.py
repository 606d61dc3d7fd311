"""Where a request runs: plain Python over plain data, testable without MLX.

The engine hands the router a snapshot of each lane (`LaneView`) and the
request (`RequestView`); a policy returns a `Placement` with a reason a person
can read. Modes restrict which lanes a policy may choose.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from .costmodel import CostModel

MODES = ("gpu-only", "hybrid", "cpu-only")


@dataclass(slots=True, frozen=True)
class LaneView:
    """A lane as the router sees it at one moment."""

    name: str
    device: str  # "gpu" or "cpu"
    queue_depth: int  # requests routed here, not started
    batch_size: int  # requests prefilling or decoding
    pending_prompt_tokens: int  # prompt tokens still to prefill (queued + running)
    decode_batch: int = 0  # requests decoding
    mean_context: float = 0.0  # mean context of the decoding requests
    remaining_tokens: float = 0.0  # expected output tokens left, summed over decoding requests
    prefill_chunk: int = 128  # prompt tokens per step while requests decode
    cost: CostModel | None = None  # a remote lane's is a RemoteCost
    capacity: int = 0  # a remote lane: the requests it serves at once (0: a local lane)
    max_batch: int = 0  # a local lane's batch slots (0: not bounded)

    @property
    def is_remote(self) -> bool:
        return self.device == "remote"

    @property
    def is_busy(self) -> bool:
        return self.batch_size > 0 or self.queue_depth > 0 or self.pending_prompt_tokens > 0


@dataclass(slots=True, frozen=True)
class RequestView:
    request_id: str
    prompt_tokens: int
    cached_tokens: int
    expected_output: int = 200  # output tokens still expected
    output_tokens: int = 0
    tab_id: str | None = None
    tokens_since_move: int = 1 << 30  # output tokens since it last changed lanes
    # Prompt tokens each remote lane is believed to hold cached for this
    # conversation (its own prefix cache; `cached_tokens` is the local one's).
    remote_cached: dict[str, int] = field(default_factory=dict)

    @property
    def uncached_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


@dataclass(slots=True, frozen=True)
class Placement:
    """Where a phase runs. For a new request `lane` runs the prefill and
    `decode_lane` is the plan for decode (re-decided when prefill ends)."""

    lane: str
    reason: str
    predicted_s: dict[str, float] = field(default_factory=dict)
    decode_lane: str | None = None
    # The chosen plan's predicted seconds to finish (its prefill lane, then
    # its decode lane): what the app measures the predictor's error against.
    predicted_done_s: float | None = None
    # Lanes the policy kept out, and why: (("cpu", "it would slow GPU more
    # than it adds (contention 0.2)"),), also said in `reason`.
    left_idle: tuple[tuple[str, str], ...] = ()


class Policy(Protocol):
    name: str

    def place(self, request: RequestView, lanes: list[LaneView]) -> Placement:
        """Choose the prefill lane of a new request."""

    def place_decode(self, request: RequestView, current: str,
                     lanes: list[LaneView]) -> Placement:
        """Choose the decode lane when a request's prefill ends on `current`."""

    def reconsider(self, request: RequestView, current: str,
                   lanes: list[LaneView]) -> Placement | None:
        """Between steps: a lane to move a decoding request to, or None."""


def eligible_lanes(mode: str, lanes: list[LaneView]) -> list[LaneView]:
    """Lanes a mode allows. Remote lanes take part in hybrid only; a mode
    whose device is missing falls back to every local lane (a machine
    without a GPU runs `gpu-only` on its CPU lanes), else to every lane."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    if mode == "gpu-only":
        chosen = [lane for lane in lanes if lane.device == "gpu"]
    elif mode == "cpu-only":
        chosen = [lane for lane in lanes if lane.device == "cpu"]
    else:
        chosen = list(lanes)
    return chosen or [lane for lane in lanes if not lane.is_remote] or list(lanes)


class LeastLoadedPolicy:
    """Send each request to the lane with the least queued work.

    Work is counted as prompt tokens still to prefill plus a token per running
    request; ties go to the GPU, then to the first lane.
    """

    name = "least-loaded"

    def place(self, request: RequestView, lanes: list[LaneView]) -> Placement:
        if not lanes:
            raise ValueError("no lanes to place on")
        # A remote is chosen on predictions, which this policy has none of.
        lanes = [lane for lane in lanes if not lane.is_remote] or lanes
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

    def place_decode(self, request: RequestView, current: str,
                     lanes: list[LaneView]) -> Placement:
        return _stay(current, lanes)

    def reconsider(self, request: RequestView, current: str,
                   lanes: list[LaneView]) -> Placement | None:
        return _leave_if_not_allowed(current, lanes)


def _leave_if_not_allowed(current: str, lanes: list[LaneView]) -> Placement | None:
    """After a mode switch, move requests off lanes the mode no longer allows."""
    if current in {lane.name for lane in lanes}:
        return None
    return _stay(current, lanes)


def _stay(current: str, lanes: list[LaneView]) -> Placement:
    """Decode where the prefill ran, unless the mode no longer allows that lane."""
    names = [lane.name for lane in lanes]
    if current in names or not names:  # none open: the engine is closing
        return Placement(current, "decode stays on the lane that prefilled it")
    return Placement(names[0], f"{current} is not allowed in this mode")
