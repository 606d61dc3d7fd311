"""The engine's routing events into the Scheduler dock: its timeline, its
decision log and what hybrid bought (the ledger). The window connects it to
the bridge's signals and names each request with `label(event)` (its chat's
title, or the API client), which the chat room knows."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject

from app.scheduler.hybrid_ledger import note as note_for


class RequestFeed(QObject):
    def __init__(self, dock, bridge, label: Callable[[object], str]):
        super().__init__(dock)
        self._dock, self._label = dock, label
        bridge.routed.connect(self.routed)
        bridge.queued.connect(self.queued)
        bridge.migrated.connect(self.migrated)
        bridge.finished.connect(self.finished)

    def routed(self, event) -> None:
        dock = self._dock
        if event.phase == "prefill":
            dock.ledger.routed(event.request_id, event.predicted_done_s, event.predicted_s,
                               dock.gpu_lanes, getattr(event, "left_idle", ()), event.time)
        dock.timeline.routed(event.request_id, self._label(event) or event.request_id,
                             event.phase, event.lane, event.time, event.reason,
                             row=event.tab_id or event.request_id,
                             restored=(event.restored_tokens, event.restore_s or 0.0),
                             images=getattr(event, "images", 0))
        dock.timeline_view.refresh()
        dock.add_decision(event.time, self._label(event), event.phase, event.lane,
                          event.reason, event.request_id)

    def queued(self, event) -> None:
        if event.reason:  # it waits for room (KV memory), not just its turn
            self._dock.add_decision(event.time, self._label(event), "wait", "",
                                    event.reason, event.request_id)

    def migrated(self, event) -> None:
        dock = self._dock
        dock.timeline.migrated(event.request_id, event.to_lane, event.time, event.reason)
        dock.add_decision(event.time, self._label(event), "move",
                          f"{event.from_lane} -> {event.to_lane}", event.reason,
                          event.request_id)

    def finished(self, finished) -> None:
        dock = self._dock
        outcome = dock.ledger.finished(finished.request_id, finished.reason, finished.e2e_s,
                                       finished.time, finished.lanes, dock.gpu_lanes)
        note = note_for(outcome, dock.ledger.summary(finished.time).median_error,
                        dock.ledger.baseline) if outcome else ""
        dock.timeline.finished(finished.request_id, finished.reason, finished.time, note,
                               finished.drafted, finished.accepted_drafts)
        dock.timeline_view.refresh()
        if outcome is not None:
            dock.add_decision(finished.time, self._label(finished), "done",
                              " → ".join(lane for _, lane in finished.lanes), note,
                              finished.request_id)
            dock.show_hybrid_summary()
