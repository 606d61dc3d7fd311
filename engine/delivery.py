"""The engine's delivery thread (`engine-events`): events that lanes emit are
handed to handles and observers here, in the order they were emitted, so that
a lane starts its next step at once instead of waiting on an observer (the
app's bridge, the server's streams, a test's counter).

Until `start` and after `stop` (which first delivers what is queued, every
request's `Finished` included), and on the delivery thread itself, an event
is delivered at once on the emitting thread.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable

from .core import priority
from .core.events import Finished
from .runtime import pauses

_STOP = object()


class Delivery:
    def __init__(self, deliver: Callable[[object], None], nice: int = 0):
        self._deliver = deliver
        self._nice = nice
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="engine-events", daemon=True)
        self._running = False

    def start(self) -> None:
        self._running = True
        self._thread.start()

    def emit(self, event) -> None:
        if self._running and threading.current_thread() is not self._thread:
            self._outbox.put(event)
        else:
            self._deliver(event)

    def stop(self) -> None:
        """Deliver what is queued, then deliver at once from here on."""
        if not self._running:
            return
        self._outbox.put(_STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join()
        self._running = False

    def _run(self) -> None:
        priority.lower_thread(self._nice)
        while True:
            event = self._outbox.get()
            if event is _STOP:
                return
            if isinstance(event, Finished):
                pauses.at("finishing")  # a test hook (runtime/pauses.py); nothing otherwise
            self._deliver(event)
