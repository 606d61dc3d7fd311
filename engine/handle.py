"""What `Engine.submit` returns: a request's events, result and cancel."""

from __future__ import annotations

import queue
import threading
from typing import Callable, Iterator

from .core.events import Finished
from .core.request import Request


class RequestHandle:
    """A submitted request: iterate its events, wait for the result, cancel it."""

    def __init__(self, request: Request, cancel: Callable[[str], None]):
        self._cancel = cancel  # the engine's cancel, given the request id
        self.request = request
        self._events: queue.Queue = queue.Queue()
        self._finished = threading.Event()
        self.finished: Finished | None = None

    @property
    def request_id(self) -> str:
        return self.request.request_id

    def deliver(self, event) -> None:
        """The engine hands the handle each of its request's events, in order."""
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
        self._cancel(self.request_id)

    def result(self, timeout: float | None = None) -> Finished:
        if not self._finished.wait(timeout):
            raise TimeoutError(f"request {self.request_id} did not finish in {timeout} s")
        assert self.finished is not None
        return self.finished
