"""An engine's events on their way out: the delivery thread (engine/delivery.py)
hands each event to its request's `RequestHandle` and to every observer, and
replays the sticky ones (the memory plan, calibrations) to late subscribers.
Shared by the local engine (engine.py) and a remote model's (remote_model.py)."""

from __future__ import annotations

import threading
import traceback
from typing import Callable

from .core.events import Calibrated, Finished, MemoryPlanned, StepTokens
from .delivery import Delivery
from .handle import RequestHandle

Observer = Callable[[object], None]
STICKY = (MemoryPlanned, Calibrated)


class EventHub:
    def __init__(self, nice: int = 0):
        self._observers: list[Observer] = []
        self._sticky: list[object] = []  # replayed to late subscribers
        self._handles: dict[str, RequestHandle] = {}
        self._lock = threading.Lock()
        self._delivery = Delivery(self._deliver, nice)

    def start(self) -> None:
        self._delivery.start()

    def stop(self) -> None:
        self._delivery.stop()  # what is queued is delivered first

    def emit(self, event) -> None:
        self._delivery.emit(event)

    def register(self, handle: RequestHandle) -> None:
        with self._lock:
            self._handles[handle.request_id] = handle

    def handle(self, request_id: str) -> RequestHandle | None:
        with self._lock:
            return self._handles.get(request_id)

    def ids_of_tab(self, tab_id: str) -> list[str]:
        with self._lock:
            return [rid for rid, h in self._handles.items() if h.request.tab_id == tab_id]

    def subscribe(self, observer: Observer) -> Callable[[], None]:
        """Call `observer(event)` for every event; the sticky ones first."""
        with self._lock:
            self._observers.append(observer)
            sticky = list(self._sticky)
        for event in sticky:
            observer(event)

        def unsubscribe() -> None:
            with self._lock:
                if observer in self._observers:
                    self._observers.remove(observer)
        return unsubscribe

    def _deliver(self, event) -> None:
        if isinstance(event, StepTokens):
            for token in event.tokens:
                self._deliver(token)
            return
        request_id = getattr(event, "request_id", None)
        with self._lock:
            observers = list(self._observers)
            if isinstance(event, STICKY):
                self._sticky.append(event)
            handle = self._handles.get(request_id) if request_id else None
            if isinstance(event, Finished):
                self._handles.pop(request_id, None)
        if handle is not None:
            handle.deliver(event)
        for observer in observers:
            try:
                observer(event)
            except Exception:  # an observer's bug must not stop a lane
                traceback.print_exc()
