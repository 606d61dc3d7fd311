"""A request: one generation's state as it moves through queue, prefill, decode."""

from __future__ import annotations

import enum
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from .events import now
from .params import SamplingParams

_ids = itertools.count(1)


def next_request_id() -> str:
    return f"r{next(_ids)}"


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # routed to a lane, not started
    PREFILLING = "prefilling"
    PREFILLED = "prefilled"  # first token sampled; its decode lane is decided next step
    DECODING = "decoding"
    MOVING = "moving"  # between lanes: extracted from one, not yet joined to the other
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Request:
    """Token ids of the rendered conversation plus everything generated so far."""

    prompt_ids: list[int]
    params: SamplingParams
    tab_id: str | None = None
    request_id: str = field(default_factory=next_request_id)
    status: RequestStatus = RequestStatus.WAITING
    output_ids: list[int] = field(default_factory=list)
    cached_tokens: int = 0
    prefix_note: str | None = None  # why no prefix could be reused (cachekinds.py)
    restored_tokens: int = 0  # of its prompt's KV, read back from disk (engine/restore.py)
    restore_s: float | None = None  # how long that took
    restore_note: str | None = None  # why it was (or was not) read back (restore_cost.py)
    num_computed: int = 0  # prompt tokens whose KV is in this request's cache
    lane_history: list[tuple[str, str]] = field(default_factory=list)
    cancel_event: threading.Event = field(default_factory=threading.Event)
    submitted_at: float = field(default_factory=now)
    first_token_at: float | None = None
    finish_reason: str | None = None
    text: Any = None  # the TextStream (engine/runtime/textstream.py); None in the simulator
    output_at_last_move: int = 0
    lane: str | None = None  # the lane holding it now
    kv_tokens: int = 0  # KV positions reserved for it (engine/core/reservation.py)
    # Its client set no max_tokens: the limit is what the context leaves, and
    # its reservation grows with it (reservation.py).
    open_ended: bool = False
    waiting_for: str | None = None  # why it waits although a batch slot is free (KV room)
    # Output tokens a remote lane streamed before it failed: the request goes
    # on locally with them appended to `prompt_ids` (they still count as output).
    carried: int = 0
    # Images (engine/models/vision.py's VisionInputs): `prompt_ids` are then
    # prefix-cache keys; the model reads `vision.model_ids` and embeddings.
    vision: Any = None
    # A chat for a remote model (engine/remote_model.py): the server applies
    # its own template to these; `prompt_ids` then only counts (estimated).
    messages: list | None = None
    # Why its lane must end it with an error at the next commit (its grammar
    # reached a state it cannot continue from): set by the runtime, read by
    # the scheduler, so that no token sampled past that point is ever shown.
    failure: str | None = None
    drafts: Any = None  # its DraftState once a lane drafted for it (core/drafts.py)
    prediction_ids: list[int] = field(default_factory=list)  # params.prediction, tokenized
    grammar_matcher: Any = None  # its grammar, built at submit (runtime/constrain.py): copied

    @property
    def num_prompt(self) -> int:
        return len(self.prompt_ids)

    @property
    def num_output(self) -> int:
        return len(self.output_ids)

    @property
    def is_cancelled(self) -> bool:
        return self.cancel_event.is_set()

    @property
    def is_finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    @property
    def all_ids(self) -> list[int]:
        """Prompt and answer as cache keys (with images, the prompt's are keys)."""
        return self.prompt_ids + self.output_ids

    @property
    def model_ids(self) -> list[int]:
        """The prompt as the model reads it: with images, the processor's ids
        (image tokens), not the cache keys in `prompt_ids`; same length."""
        return self.vision.model_ids if self.vision is not None else self.prompt_ids

    def recent_ids(self, count: int) -> list[int]:
        """The last `count` tokens of prompt and answer as the model read them
        (repetition penalties), without copying the rest."""
        if count <= 0:
            return []
        out = self.output_ids
        if count <= len(out):
            return out[-count:]
        return self.model_ids[-(count - len(out)):] + out

    def note_lane(self, phase: str, lane: str) -> None:
        if not self.lane_history or self.lane_history[-1] != (phase, lane):
            self.lane_history.append((phase, lane))
