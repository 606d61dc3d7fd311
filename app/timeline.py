"""The routing timeline: one row per request, bars coloured by lane and phase,
growing live. `Timeline` is the Qt-free record; `TimelineView` draws it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QWidget

MAX_TRACKS = 300
LANE_COLORS = {"gpu": "#2e86de", "cpu": "#e67e22"}


@dataclass(slots=True)
class Segment:
    phase: str  # "prefill" or "decode"
    lane: str
    start: float
    end: float | None = None


@dataclass(slots=True)
class Track:
    request_id: str
    label: str
    segments: list[Segment] = field(default_factory=list)
    finished: str | None = None  # finish reason

    def close(self, at: float) -> None:
        if self.segments and self.segments[-1].end is None:
            self.segments[-1].end = at


class Timeline:
    """Segments per request, built from Routed / Migrated / Finished events."""

    def __init__(self):
        self.tracks: dict[str, Track] = {}

    def routed(self, request_id: str, label: str, phase: str, lane: str, at: float) -> None:
        track = self.tracks.get(request_id)
        if track is None:
            track = self.tracks[request_id] = Track(request_id, label)
            while len(self.tracks) > MAX_TRACKS:
                self.tracks.pop(next(iter(self.tracks)))
        if track.segments and track.segments[-1].phase == phase and \
                track.segments[-1].lane == lane and track.segments[-1].end is None:
            return
        track.close(at)
        track.segments.append(Segment(phase, lane, at))

    def migrated(self, request_id: str, to_lane: str, at: float) -> None:
        track = self.tracks.get(request_id)
        if track is not None:
            track.close(at)
            track.segments.append(Segment("decode", to_lane, at))

    def finished(self, request_id: str, reason: str, at: float) -> None:
        track = self.tracks.get(request_id)
        if track is not None:
            track.close(at)
            track.finished = reason

    def start_time(self) -> float | None:
        starts = [t.segments[0].start for t in self.tracks.values() if t.segments]
        return min(starts) if starts else None


class TimelineView(QWidget):
    """Draws a `Timeline`; click a row to select its request."""

    request_selected = Signal(str)
    ROW = 18
    LABEL = 120
    PX_PER_S = 40.0

    def __init__(self, timeline: Timeline, lane_kinds: dict[str, str] | None = None,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.timeline = timeline
        self.lane_kinds = lane_kinds or {}
        self.setMinimumHeight(self.ROW * 3)

    def now(self) -> float:
        return time.monotonic()

    def sizeHint(self) -> QSize:  # noqa: N802
        start = self.timeline.start_time()
        span = (self.now() - start) if start is not None else 0.0
        return QSize(int(self.LABEL + span * self.PX_PER_S + 20),
                     max(self.ROW * (len(self.timeline.tracks) + 1), self.ROW * 3))

    def refresh(self) -> None:
        self.setMinimumSize(self.sizeHint())
        self.update()

    def color(self, lane: str, phase: str) -> QColor:
        color = QColor(LANE_COLORS.get(self.lane_kinds.get(lane, lane), "#888"))
        return color.lighter(140) if phase == "prefill" else color

    def paintEvent(self, event):  # noqa: N802
        painter = QPainter(self)
        painter.fillRect(self.rect(), self.palette().base())
        start = self.timeline.start_time()
        if start is None:
            painter.drawText(self.rect(), Qt.AlignCenter, "No requests yet")
            return
        now = self.now()
        # Labels stay pinned to the visible left edge while the bars scroll.
        left = self.visibleRegion().boundingRect().left()
        for row, track in enumerate(self.timeline.tracks.values()):
            y = row * self.ROW
            for seg in track.segments:
                x0 = self.LABEL + (seg.start - start) * self.PX_PER_S
                x1 = self.LABEL + ((seg.end or now) - start) * self.PX_PER_S
                rect = QRectF(x0, y + 3, max(x1 - x0, 2.0), self.ROW - 6)
                painter.fillRect(rect, self.color(seg.lane, seg.phase))
                if seg.phase == "prefill":
                    painter.setPen(QPen(self.color(seg.lane, "decode"), 1))
                    painter.drawRect(rect)
            label = QRectF(left, y, self.LABEL, self.ROW)
            painter.fillRect(label, self.palette().base())
            painter.setPen(self.palette().text().color())
            painter.drawText(label.adjusted(4, 0, -4, 0), Qt.AlignVCenter,
                             painter.fontMetrics().elidedText(track.label, Qt.ElideRight,
                                                              self.LABEL - 8))

    def mousePressEvent(self, event):  # noqa: N802
        row = int(event.position().y() // self.ROW)  # any x on the row selects it
        tracks = list(self.timeline.tracks.values())
        if 0 <= row < len(tracks):
            self.request_selected.emit(tracks[row].request_id)
