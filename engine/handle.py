"""What `submit` returns: a request's events, result and cancel.

Events arrive on the engine's delivery thread (`deliver`) and wait in the
handle until read. Read them with a plain `for event in handle` (a thread
blocks) or, in asyncio code, `async for event in handle` and `await handle`
(the result): then the delivery thread wakes the waiting loop with
`loop.call_soon_threadsafe`, only while a reader is waiting, so a streamed
request costs no thread of its own. Each event is read once, by whichever
reader takes it; `result()` / `await handle` only wait for the end.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from typing import AsyncIterator, Callable, Iterator

from .core.events import Finished
from .core.request import Request


def _wake(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class RequestHandle:
    """A submitted request: iterate its events (sync or async), wait for the
    result (`result()` or `await handle`), cancel it."""

    def __init__(self, request: Request, cancel: Callable[[str], None]):
        self._cancel = cancel  # the engine's cancel, given the request id
        self.request = request
        self._events: deque = deque()
        self._cond = threading.Condition()  # guards _events, _waiters, finished
        # asyncio readers waiting for the next event (or for the end):
        # (loop, future, wants) with wants "event" or "end".
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future, str]] = []
        self.finished: Finished | None = None

    @property
    def request_id(self) -> str:
        return self.request.request_id

    def deliver(self, event) -> None:
        """The engine hands the handle each of its request's events, in order."""
        end = isinstance(event, Finished)
        with self._cond:
            self._events.append(event)
            if end:
                self.finished = event
            self._cond.notify_all()
            woken = [w for w in self._waiters if end or w[2] == "event"]
            self._waiters = [w for w in self._waiters if w not in woken]
        for loop, future, _ in woken:
            try:
                loop.call_soon_threadsafe(_wake, future)
            except RuntimeError:  # that loop is closed: nobody is listening
                pass

    # ---- a thread reading ------------------------------------------------------
    def __iter__(self) -> Iterator[object]:
        while True:
            with self._cond:
                while not self._events:
                    self._cond.wait()
                event = self._events.popleft()
            yield event
            if isinstance(event, Finished):
                return

    def result(self, timeout: float | None = None) -> Finished:
        with self._cond:
            if not self._cond.wait_for(lambda: self.finished is not None, timeout):
                raise TimeoutError(f"request {self.request_id} did not finish in {timeout} s")
            return self.finished

    # ---- asyncio reading -------------------------------------------------------
    def __aiter__(self) -> AsyncIterator[object]:
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[object]:
        while True:
            event = await self._next_event()
            yield event
            if isinstance(event, Finished):
                return

    def __await__(self):
        """`await handle`: the request's `Finished` (its events stay to be read)."""
        return self._wait_end().__await__()

    async def _next_event(self):
        while True:
            with self._cond:
                if self._events:
                    return self._events.popleft()
                future = self._wait_locked("event")
            await self._await(future)

    async def _wait_end(self) -> Finished:
        while True:
            with self._cond:
                if self.finished is not None:
                    return self.finished
                future = self._wait_locked("end")
            await self._await(future)

    def _wait_locked(self, wants: str) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._waiters.append((loop, future, wants))
        return future

    async def _await(self, future: asyncio.Future) -> None:
        try:
            await future
        finally:  # cancelled (a client gone): no wake-up for it later
            with self._cond:
                self._waiters = [w for w in self._waiters if w[1] is not future]

    def cancel(self) -> None:
        self._cancel(self.request_id)
