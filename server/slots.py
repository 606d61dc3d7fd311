"""A bounded number of requests in flight, and a slot that cannot leak.

`Slots.take()` answers 429 (with Retry-After) when all are taken; the `Slot`
it returns is given back exactly once, whichever path ends the request:
success, an error, a disconnect, a stream nobody reads (see api.py)."""

from __future__ import annotations

import threading

from .errors import APIError


class Slot:
    def __init__(self, slots: "Slots"):
        self._slots = slots
        self._held = True

    def release(self) -> None:
        """Give the slot back (later calls do nothing)."""
        with self._slots._lock:
            if self._held:
                self._held = False
                self._slots._in_flight -= 1

    def __enter__(self) -> "Slot":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class Slots:
    def __init__(self, limit: int):
        self.limit = limit
        self._in_flight = 0
        self._lock = threading.Lock()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def take(self) -> Slot:
        with self._lock:
            if self._in_flight >= self.limit:
                raise APIError(429, "Too many requests in flight; retry shortly.",
                               kind="rate_limit_error", headers={"Retry-After": "1"})
            self._in_flight += 1
        return Slot(self)
