"""Engine events: plain, timestamped dataclasses emitted on engine threads.

Observers must return quickly; the app's bridge turns them into Qt signals.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


def now() -> float:
    return time.monotonic()


@dataclass(slots=True, frozen=True)
class Event:
    request_id: str
    tab_id: str | None


@dataclass(slots=True, frozen=True)
class Queued(Event):
    """A request waits: at submit (reason ''), or later for KV room on its lane."""

    prompt_tokens: int
    reason: str = ""
    time: float = field(default_factory=now)


@dataclass(slots=True, frozen=True)
class Routed(Event):
    """A placement decision: `phase` ('prefill' or 'decode') runs on `lane`."""

    phase: str
    lane: str
    reason: str
    predicted_s: dict[str, float] = field(default_factory=dict)
    cached_tokens: int = 0
    time: float = field(default_factory=now)
    predicted_done_s: float | None = None  # the chosen plan's prediction (new requests)
    # Read back from disk before this decision (engine/restore.py): how many
    # of its prompt's tokens, in how long (the timeline draws that phase).
    restored_tokens: int = 0
    restore_s: float | None = None
    images: int = 0  # images its prefill encodes (a vision model's request)
    left_idle: tuple[tuple[str, str], ...] = ()  # lanes kept out and why (Placement.left_idle)


@dataclass(slots=True, frozen=True)
class Migrated(Event):
    """A decoding request moved between lanes (between steps)."""

    from_lane: str
    to_lane: str
    reason: str
    predicted_s: dict[str, float] = field(default_factory=dict)
    time: float = field(default_factory=now)


@dataclass(slots=True, frozen=True)
class Token(Event):
    """One sampled token and the text it completes (may be '' mid-character):
    `text` of the answer, `reasoning` of a reasoning model's thinking."""

    token_id: int
    text: str
    lane: str
    time: float = field(default_factory=now)
    reasoning: str = ""
    # With SamplingParams.logprobs: the token's log-probability under the
    # model's raw distribution, and the likeliest alternatives as (id, logprob).
    logprob: float | None = None
    top_logprobs: tuple[tuple[int, float], ...] = ()
    # Tool calls this token completed (raw text between the model's markers;
    # the request offered tools: Engine.submit(tools=...)).
    tool_calls: tuple[str, ...] = ()
    drafted: bool = False  # an accepted draft: proposed, then verified (issue 32)
    cut_call: bool = False  # the last of tool_calls is cut: max_tokens ended the answer in it


@dataclass(slots=True, frozen=True)
class StepTokens:
    """One lane step's tokens, one `Token` per request that got text (in
    batch order). Lanes emit this; the engine delivers each `Token` to its
    request's handle and to observers, which never see `StepTokens`."""

    lane: str
    tokens: tuple[Token, ...]
    time: float = field(default_factory=now)


@dataclass(slots=True, frozen=True)
class Finished(Event):
    """The end of a request. reason: 'stop', 'length', 'cancelled' or 'error'."""

    reason: str
    text: str
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    ttft_s: float | None
    time_per_output_token_s: float | None
    e2e_s: float
    lanes: tuple[tuple[str, str], ...] = ()  # (phase, lane) in order
    error: str | None = None
    time: float = field(default_factory=now)
    prefix_note: str | None = None  # set when the prefix cache cannot serve this model
    restored_tokens: int = 0  # of its prompt's KV, read back from disk (issue 33)
    restore_s: float | None = None
    reasoning: str = ""  # a reasoning model's thinking (its markers stripped); not in `text`
    tool_calls: tuple[str, ...] = ()  # raw text of each tool call, in order; not in `text`
    cut_call: bool = False  # the last of tool_calls is cut: the answer ('length') ended in it
    stop_sequence: str | None = None  # the stop string that ended it ('stop'), if one did
    # Drafts (LaneConfig(drafts=...)): tokens proposed and accepted; why it
    # drafted nothing when it could not (its caches cannot rewind).
    drafted: int = 0
    accepted_drafts: int = 0
    draft_note: str | None = None

    @property
    def tokens_per_s(self) -> float | None:
        if not self.time_per_output_token_s:
            return None
        return 1.0 / self.time_per_output_token_s


@dataclass(slots=True, frozen=True)
class LaneSample:
    """A lane's state, about 10 times a second."""

    lane: str
    device: str
    busy_fraction: float
    tokens_per_s: float
    batch_size: int
    queue_depth: int
    kv_bytes: int
    prefix_cache_bytes: int
    phase: str = "serving"  # or starting, warming up, calibrating, failed (Lane.phase)
    prefill_left: int = 0  # prompt tokens still to prefill on this lane
    drafted: int = 0  # draft tokens this lane verified so far (issue 32)
    accepted_drafts: int = 0  # of those, accepted
    # Where its draft model ran last and why (core/draft_place.py; "": none).
    drafts_on: str = ""
    time: float = field(default_factory=now)


@dataclass(slots=True, frozen=True)
class Calibrated:
    """A lane's cost model after its start-up calibration."""

    lane: str
    device: str
    prefill_tps: float
    decode_tps: float
    batch_alpha: float
    seconds: float
    contention: float = 0.0  # as the last run here learned it (coststore.py), else 0
    time: float = field(default_factory=now)


@dataclass(slots=True, frozen=True)
class EngineErrorEvent(Event):
    """An error not tied to the user's input (a lane crashed, out of memory)."""

    message: str
    lane: str = ""  # the lane that failed, if one did
    time: float = field(default_factory=now)
    restarting: bool = False  # that lane restarts (engine/runtime/lane_restart.py): it comes back



@dataclass(slots=True, frozen=True)
class MemoryPlanned(Event):
    """The engine's memory plan at load (engine/core/memory.py `MemoryPlan`):
    weights per lane, KV per token, KV budgets, prefix cache, lanes left off."""

    plan: object
    time: float = field(default_factory=now)
