"""Engine events to Qt signals, on the GUI thread, at a bounded repaint rate.

The engine calls observers on its own threads. The bridge only appends each
event to a queue there; a GUI-thread timer drains the queue every ~33 ms,
merges consecutive text of a request into one `tokens` signal (so the GUI
repaints at most ~30 times a second however fast tokens come), and emits the
other events in the order they happened.
"""

from __future__ import annotations

import threading
from collections import deque

from PySide6.QtCore import QObject, QTimer, Signal

from engine import EngineErrorEvent, Finished, LaneSample, Migrated, Queued, Routed, Token

FLUSH_INTERVAL_MS = 33


class EngineBridge(QObject):
    queued = Signal(object)  # Queued
    routed = Signal(object)  # Routed
    migrated = Signal(object)  # Migrated
    tokens = Signal(str, str)  # request_id, text delta (coalesced)
    drafted = Signal(str, str)  # request_id, text of an accepted draft run (before `tokens`)
    thinking = Signal(str, str)  # request_id, a reasoning model's thinking delta (coalesced)
    finished = Signal(object)  # Finished
    lane_sample = Signal(object)  # LaneSample
    lane_failed = Signal(str, str)  # lane, why
    error = Signal(str)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._pending: deque = deque()
        self._lock = threading.Lock()
        self._subscriptions: dict[int, object] = {}  # id(engine) -> unsubscribe
        self._timer = QTimer(self)
        self._timer.setInterval(FLUSH_INTERVAL_MS)
        self._timer.timeout.connect(self.flush)
        self._timer.start()

    def attach(self, engine) -> None:
        """Observe `engine` too (an engine being closed in the background stays
        observed until `detach(engine)`, so its answers end in their tabs)."""
        if id(engine) not in self._subscriptions:
            self._subscriptions[id(engine)] = engine.subscribe(self._on_engine_event)

    def detach(self, engine=None) -> None:
        """Stop observing `engine` (every engine when None)."""
        keys = list(self._subscriptions) if engine is None else [id(engine)]
        for key in keys:
            unsubscribe = self._subscriptions.pop(key, None)
            if unsubscribe is not None:
                unsubscribe()

    def _on_engine_event(self, event) -> None:  # engine threads
        with self._lock:
            self._pending.append(event)

    def flush(self) -> None:
        """Deliver queued events (GUI thread)."""
        with self._lock:
            events = list(self._pending)
            self._pending.clear()
        text: dict[str, list[str]] = {}
        thought: dict[str, list[str]] = {}
        latest_sample: dict[str, LaneSample] = {}

        runs: dict[str, list[str]] = {}  # accepted drafts' text, run by run

        def end_run(request_id: str) -> None:
            parts = runs.pop(request_id, None)
            if parts:
                self.drafted.emit(request_id, "".join(parts))

        def flush_text(request_id: str | None = None) -> None:
            for rid in [request_id] if request_id else list(runs):
                end_run(rid)  # before the text it tints
            # A request's thinking comes before its answer (so within a flush too).
            for rid in [request_id] if request_id else list(thought):
                parts = thought.pop(rid, None)
                if parts:
                    self.thinking.emit(rid, "".join(parts))
            for rid in [request_id] if request_id else list(text):
                parts = text.pop(rid, None)
                if parts:
                    self.tokens.emit(rid, "".join(parts))

        for event in events:
            if isinstance(event, Token):
                if event.reasoning:
                    thought.setdefault(event.request_id, []).append(event.reasoning)
                if event.text:
                    text.setdefault(event.request_id, []).append(event.text)
                    if event.drafted:  # a run of accepted drafts grows
                        runs.setdefault(event.request_id, []).append(event.text)
                    else:
                        end_run(event.request_id)
            elif isinstance(event, LaneSample):
                latest_sample[event.lane] = event
            elif isinstance(event, Finished):
                flush_text(event.request_id)
                self.finished.emit(event)
            elif isinstance(event, Routed):
                self.routed.emit(event)
            elif isinstance(event, Migrated):
                self.migrated.emit(event)
            elif isinstance(event, Queued):
                self.queued.emit(event)
            elif isinstance(event, EngineErrorEvent):
                # A lane that restarts comes back: its card shows its phases.
                if event.lane and not getattr(event, "restarting", False):
                    self.lane_failed.emit(event.lane, event.message)
                self.error.emit(event.message)
        flush_text()
        for sample in latest_sample.values():
            self.lane_sample.emit(sample)
