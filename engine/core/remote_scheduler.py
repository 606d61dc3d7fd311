"""A remote lane as the director sees it: a queue, the requests in flight,
a capacity, a learned cost and a circuit breaker. Plain Python, no I/O.

It stands beside the local lanes' `LaneScheduler`s in the `Director` and
answers the same questions (open? idle? a view for the router; enqueue),
but it plans no steps: the remote finishes whole requests, so it never
takes a hand-over (`can_take`, `adopt`) and its requests never move off it,
except to continue on a local lane when it fails. engine/remote/lane.py
runs it for real; engine/sim/remote.py in virtual time.

Capacity is additive-increase, multiplicative-decrease: a 429 (or a failure
while busy) cuts it to what was in flight less one; a run of answers at full
capacity without slowing down raises it by one, up to where another stream
stops adding to the remote's output rate (the cost model's batch factor).

Sticky conversations: it remembers, per tab, the tokens the remote last held
(prompt and answer), so the router counts the remote's own prefix cache; the
remote's reported cached tokens correct that belief (`prefix_hit`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from typing import Callable

from .events import now
from .remote import MAX_CAPACITY, CircuitBreaker, RemoteSpec
from .remote_cost import RemoteCost
from .request import Request
from .router import LaneView
from .scheduler import LaneScheduler

KIND = "remote"
TABS_REMEMBERED = 256


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class RemoteScheduler:
    """One remote lane's queue and state, under the director's lock."""

    kind = KIND
    device = KIND
    kv_budget_bytes = None  # the remote holds its own KV
    prefill_left = 0

    def __init__(self, spec: RemoteSpec, lock: threading.RLock,
                 cost: RemoteCost | None = None, clock: Callable[[], float] = now):
        self.spec = spec
        self.name = spec.name
        self.lock = lock
        self.clock = clock
        self.cost = cost or RemoteCost()
        self.breaker = CircuitBreaker(clock)
        self.capacity = spec.capacity
        self.waiting: deque[Request] = deque()
        self.in_flight: list[Request] = []
        self.closed = False
        self.failed: str | None = None  # a setting that can never work (wrong key, no model)
        self.warming_up = True  # until its first probe answered
        self.prefix_hit = 1.0  # reported cached tokens / what we believed it held
        self._held: OrderedDict[str, list[int]] = OrderedDict()  # tab -> its tokens there
        self._full_streak = 0  # answers in a row at full capacity that kept their speed
        self.output_tokens = 0  # streamed by it, for the lane's samples
        self.started = 0

    # ---- what the director asks ------------------------------------------------
    @property
    def is_open(self) -> bool:
        return not self.closed and self.failed is None and self.breaker.available()

    @property
    def is_idle(self) -> bool:
        return not (self.waiting or self.in_flight)

    @property
    def queue_depth(self) -> int:
        return len(self.waiting)

    @property
    def batch_size(self) -> int:
        return len(self.in_flight)

    def active(self) -> list[Request]:
        return list(self.in_flight)

    def fits_alone(self, request: Request) -> bool:
        return True

    def can_take(self, request: Request) -> bool:
        return False  # whole requests only: nothing moves onto a remote mid-answer

    def adopt(self, request: Request) -> bool:
        return False

    def kv_bytes_for(self, requests: list[Request]) -> int:
        return 0

    def held_for(self, request: Request) -> int:
        """Prompt tokens of `request` the remote is believed to hold cached."""
        held = self._held.get(request.tab_id or "")
        if not held:
            return 0
        common = _common_prefix(held, request.prompt_ids)
        return min(int(common * self.prefix_hit), request.num_prompt - 1)

    def view(self, expected_left: Callable[[Request], int]) -> LaneView:
        with self.lock:
            left = float(sum(expected_left(r) for r in self.in_flight))
            return LaneView(self.name, KIND, len(self.waiting), len(self.in_flight), 0,
                            0, 0.0, left, cost=self.cost, capacity=self.capacity)

    # The same queue rules as a local lane's (is_open is this lane's own).
    enqueue = LaneScheduler.enqueue
    close = LaneScheduler.close
    fail = LaneScheduler.fail

    # ---- what the lane that runs it does ------------------------------------------
    def next_request(self) -> Request | None:
        """The next queued request to send, if the capacity has room (the
        breaker allows one trial request while half-open)."""
        with self.lock:
            if not self.waiting or self.waiting[0].is_cancelled or len(self.in_flight) >= self.capacity:
                return None
            if self.breaker.state != "closed" and (self.in_flight or self.breaker.trial):
                return None
            request = self.waiting.popleft()
            self.breaker.started()
            self.in_flight.append(request)
            request.note_lane("prefill", self.name)
            request.note_lane("decode", self.name)
            self.started += 1
            return request

    def take_cancelled(self) -> Request | None:
        with self.lock:
            if self.waiting and self.waiting[0].is_cancelled:
                return self.waiting.popleft()
            return None

    def done(self, request: Request) -> None:
        with self.lock:
            if request in self.in_flight:
                self.in_flight.remove(request)

    def drain(self) -> list[Request]:
        with self.lock:
            requests = list(self.waiting) + self.in_flight
            self.waiting.clear()
            self.in_flight = []
            return requests

    def answered(self, request: Request, held_ids: list[int], reported_cached: int | None,
                 believed_cached: int, concurrency: float, kept_speed: bool) -> None:
        """A request finished well: remember what it holds for the tab, learn
        its prefix hits and its capacity."""
        with self.lock:
            self.breaker.success()
            tab = request.tab_id or ""
            self._held[tab] = held_ids
            self._held.move_to_end(tab)
            while len(self._held) > TABS_REMEMBERED:
                self._held.popitem(last=False)
            if reported_cached is not None and believed_cached > 0:
                seen = min(reported_cached / believed_cached, 1.0)
                self.prefix_hit += 0.3 * (seen - self.prefix_hit)
            useful = self.cost.useful_concurrency(MAX_CAPACITY)
            if self.cost.alpha_fitted and self.capacity > useful:
                # Its streams slow so much with company that more at once adds
                # little: keep to what still pays (the rest queue, predicted).
                self.capacity = useful
                self._full_streak = 0
            elif concurrency >= self.capacity - 0.5 and kept_speed:
                self._full_streak += 1
                if self._full_streak >= self.capacity and self.capacity < useful:
                    self.capacity += 1
                    self._full_streak = 0
            elif not kept_speed:
                self._full_streak = 0

    def rate_limited(self, retry_after_s: float | None) -> float | None:
        """It answered 429: the capacity drops to what was in flight less
        one. Refused with nothing else in flight, it is down for the
        back-off it asked for (the returned seconds); else None."""
        with self.lock:
            in_flight = len(self.in_flight)  # the refused request is still counted
            self.capacity = max(1, min(self.capacity, in_flight - 1))
            self._full_streak = 0
            if in_flight <= 1:
                return self.breaker.failure("busy (429)", retry_after_s)
            return None

    def broke(self, reason: str) -> float:
        """It failed (refused, timed out, cut the stream, answered garbage):
        down for a back-off that doubles while it keeps failing (seconds)."""
        with self.lock:
            self._full_streak = 0
            return self.breaker.failure(reason)

    def forget(self, tab_id: str | None) -> None:
        with self.lock:
            self._held.pop(tab_id or "", None)

    def describe(self, model: str = "") -> str:
        spec = self.spec
        state = self.failed or self.breaker.describe()
        if self.warming_up and not self.failed:
            state = "connecting"
        return (f"REMOTE {model or spec.model or 'model'} at {spec.host}: {state}; "
                f"{len(self.in_flight)}/{self.capacity} in flight; {self.cost.describe()}")
