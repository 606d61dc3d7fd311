"""What `Engine.submit` returns: a request's events, result and cancel."""

from __future__ import annotations

import queue
import threading
from typing import TYPE_CHECKING, Iterator

from .events import Finished
from .request import Request

if TYPE_CHECKING:
    from .engine import Engine


class RequestHandle:
    """A submitted request: iterate its events, wait for the result, cancel it."""

    def __init__(self, engine: "Engine", request: Request):
        self._engine = engine
        self.request = request
        self._events: queue.Queue = queue.Queue()
        self._finished = threading.Event()
        self.finished: Finished | None = None

    @property
    def request_id(self) -> str:
        return self.request.request_id

    def _deliver(self, event) -> None:
        self._events.put(event)
        if isinstance(event, Finished):
            self.finished = event
            self._finished.set()

    def __iter__(self) -> Iterator[object]:
        while True:
            event = self._events.get()
            yield event
            if isinstance(event, Finished):
                return

    def cancel(self) -> None:
        self._engine.cancel(self.request_id)

    def result(self, timeout: float | None = None) -> Finished:
        if not self._finished.wait(timeout):
            raise TimeoutError(f"request {self.request_id} did not finish in {timeout} s")
        assert self.finished is not None
        return self.finished
