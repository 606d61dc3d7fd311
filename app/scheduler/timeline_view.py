"""The routing timeline drawn: a row per chat (or API client), each request
a bar coloured by lane and phase on a real time axis. `TimelineView` draws
a `Timeline` (app/scheduler/timeline.py) and `TimelinePanel` adds the zoom
and follow-now controls.

At any zoom a bar stays readable: every request is outlined (two requests
of one chat never merge into one block), a prefill is pale with a solid
foot, a bar is at least 3 px wide. Hover says what the bar is and why the router put it
there; a click selects its request (the window opens its chat at the
answer). The axis labels `time.monotonic()` seconds with the wall clock.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import (QHBoxLayout, QLabel, QScrollArea, QToolButton, QToolTip,
                               QVBoxLayout, QWidget)

from app.scheduler.timeline import Segment, Timeline, Track
from app.ui.plain_text import tip

LANE_COLORS = {"gpu": "#2e86de", "cpu": "#e67e22", "remote": "#27ae60", "disk": "#8e44ad",
               "tool": "#95a5a6"}
SPANS_S = (10, 30, 60, 120, 300, 600, 1800, 3600)  # the zoom steps, seconds shown
TICK_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)


def tick_step(span_s: float, width_px: float, min_gap_px: float = 70) -> float:
    """The smallest round step (seconds) whose ticks are `min_gap_px` apart."""
    for step in TICK_STEPS_S:
        if step / span_s * width_px >= min_gap_px:
            return step
    return TICK_STEPS_S[-1]


class TimelineView(QWidget):
    """Draws a `Timeline` over [end - span, end]; `end` follows now unless the
    user pans. Wheel zooms, drag pans, double-click follows now again."""

    request_selected = Signal(str)
    view_changed = Signal()  # zoom or follow changed (the panel's controls)
    ROW = 18
    LABEL = 110
    AXIS = 18

    def __init__(self, timeline: Timeline, lane_kinds: dict[str, str] | None = None,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.timeline = timeline
        self.lane_kinds = lane_kinds or {}
        self.span_s = 60.0
        self.follow = True
        self.end_t = self.now()  # the right edge when not following
        self._drag: tuple[float, float] | None = None  # (x, end_t) where a drag began
        self.setMouseTracking(True)  # hover tooltips
        self.setMinimumHeight(self.AXIS + self.ROW * 3)

    # ---- time <-> pixels ---------------------------------------------------------
    def now(self) -> float:
        return time.monotonic()

    def window(self) -> tuple[float, float]:
        end = self.now() if self.follow else self.end_t
        return end - self.span_s, end

    def _scale(self) -> float:
        return max(self.width() - self.LABEL - 6, 1) / self.span_s

    def x_of(self, t: float) -> float:
        return self.LABEL + (t - self.window()[0]) * self._scale()

    def t_of(self, x: float) -> float:
        return self.window()[0] + (x - self.LABEL) / self._scale()

    # ---- the view ----------------------------------------------------------------
    def zoom(self, factor: float, anchor_x: float | None = None) -> None:
        """Show `factor` times the span (< 1 zooms in), keeping the time under
        `anchor_x` in place (the right edge while following now)."""
        span = min(max(self.span_s * factor, SPANS_S[0] / 2), SPANS_S[-1] * 2)
        if anchor_x is not None and not self.follow:
            anchor = self.t_of(anchor_x)
            frac = (anchor_x - self.LABEL) / max(self.width() - self.LABEL - 6, 1)
            self.end_t = anchor + (1 - frac) * span
        self.span_s = span
        self.view_changed.emit()
        self.update()

    def set_follow(self, follow: bool) -> None:
        if not follow and self.follow:
            self.end_t = self.now()
        self.follow = follow
        self.view_changed.emit()
        self.update()

    def refresh(self) -> None:
        rows = len(self.timeline.rows)
        self.setMinimumHeight(self.AXIS + self.ROW * max(rows, 3))
        self.update()

    def color(self, lane: str, phase: str) -> QColor:
        color = QColor(LANE_COLORS.get(self.lane_kinds.get(lane, lane), "#888"))
        return color.lighter(135) if phase == "prefill" else color

    def paintEvent(self, event):  # noqa: N802
        painter = QPainter(self)
        palette = self.palette()
        painter.fillRect(self.rect(), palette.base())
        visible = self.visibleRegion().boundingRect()
        text_color = palette.text().color()
        if self.timeline.start_time() is None:
            painter.setPen(text_color)
            painter.drawText(self.rect(), Qt.AlignCenter, "No requests yet")
            return
        now = self.now()
        start, end = self.window()
        for row, (label, tracks) in enumerate(self.timeline.row_tracks()):
            y = self.AXIS + row * self.ROW
            for track in tracks:
                if track.end(now) < start or track.start > end:
                    continue
                self._draw_track(painter, track, y, now)
            painter.setPen(text_color)
            painter.fillRect(QRectF(0, y, self.LABEL, self.ROW), palette.base())
            painter.drawText(QRectF(4, y, self.LABEL - 8, self.ROW), Qt.AlignVCenter,
                             painter.fontMetrics().elidedText(label, Qt.ElideRight,
                                                              self.LABEL - 8))
        self._draw_axis(painter, visible.top(), start, end, now, text_color)

    def _bar(self, seg: Segment, y: float, now: float) -> QRectF:
        x0 = max(self.x_of(seg.start), self.LABEL)
        x1 = min(self.x_of(seg.end or now), self.width())
        return QRectF(x0, y + 3, max(x1 - x0, 3.0), self.ROW - 6)

    def _draw_track(self, painter: QPainter, track: Track, y: float, now: float) -> None:
        outline = None
        for seg in track.segments:
            rect = self._bar(seg, y, now)
            if rect.left() >= self.width():
                continue
            painter.fillRect(rect, self.color(seg.lane, seg.phase))
            if seg.phase == "prefill":  # a pale bar with a solid foot: a prefill at any zoom
                painter.fillRect(QRectF(rect.left(), rect.bottom() - 2, rect.width(), 2),
                                 self.color(seg.lane, "decode"))
            elif track.accepted:  # drafts paid here: a pale band along its top
                painter.fillRect(QRectF(rect.left(), rect.top(), rect.width(), 3),
                                 self.color(seg.lane, "decode").lighter(160))
            outline = rect if outline is None else outline.united(rect)
        if outline is not None:  # each request outlined: a chat's requests stay apart
            painter.setPen(QPen(self.palette().text().color(), 1))
            painter.setBrush(Qt.NoBrush)
            painter.drawRect(outline.adjusted(0, 0, -1, 0))
            if track.finished in ("cancelled", "error"):
                painter.drawText(QRectF(outline.right() + 2, y, 12, self.ROW), Qt.AlignVCenter,
                                 "×")

    def _draw_axis(self, painter: QPainter, top: float, start: float, end: float, now: float,
                   text_color: QColor) -> None:
        """Clock-time ticks along the top (pinned while rows scroll)."""
        band = QRectF(0, top, self.width(), self.AXIS)
        painter.fillRect(band, self.palette().alternateBase())
        painter.setPen(text_color)
        step = tick_step(self.span_s, self.width() - self.LABEL)
        wall = time.time() - now  # monotonic -> wall clock
        tick = (int((start + wall) // step) + 1) * step - wall
        fmt = "%H:%M:%S" if step < 60 else "%H:%M"
        while tick <= end:
            x = self.x_of(tick)
            painter.drawLine(QPointF(x, top + self.AXIS - 4), QPointF(x, top + self.AXIS))
            painter.drawText(QRectF(x - 40, top, 80, self.AXIS - 3), Qt.AlignCenter,
                             time.strftime(fmt, time.localtime(tick + wall)))
            tick += step
        painter.drawText(QRectF(4, top, self.LABEL - 8, self.AXIS), Qt.AlignVCenter,
                         "now" if self.follow else "paused")

    # ---- finding what is under the pointer ------------------------------------------
    def hit(self, x: float, y: float) -> tuple[Track, Segment | None] | None:
        """The request (and its segment) drawn at (x, y); a row's label is its
        latest request."""
        row = int((y - self.AXIS) // self.ROW)
        rows = self.timeline.row_tracks()
        if y < self.AXIS or not 0 <= row < len(rows) or not rows[row][1]:
            return None
        tracks = rows[row][1]
        if x < self.LABEL:
            return tracks[-1], None
        now = self.now()
        for track in reversed(tracks):
            for seg in track.segments:
                rect = self._bar(seg, self.AXIS + row * self.ROW, now)
                if rect.left() - 2 <= x <= rect.right() + 2:
                    return track, seg
        return None

    def describe(self, track: Track, seg: Segment | None) -> str:
        now = self.now()
        lines = [track.label]
        for s in track.segments:
            images = f" ({s.images} image{'s' * (s.images != 1)})" if s.images else ""
            what = ("read from disk" if s.phase == "restore" else "waiting on a tool"
                    if s.phase == "tool" else f"{s.phase}{images} on {s.lane.upper()}")
            lines.append(f"{what}, {(s.end or now) - s.start:.1f} s"
                         + (f": {s.reason}" if s.reason and s is seg else ""))
        if track.finished == "tool":
            lines.append(seg.reason if seg is not None else "")
        elif track.finished:
            lines.append(track.note or f"finished ({track.finished}) in "
                         f"{track.end(now) - track.start:.1f} s")
        if track.drafted:
            lines.append(f"drafts: {track.accepted:,} of {track.drafted:,} accepted "
                         f"(several tokens a step)")
        return "\n".join(lines)

    def mouseMoveEvent(self, event):  # noqa: N802
        pos = event.position()
        if self._drag is not None:  # pan: the time under the pointer stays there
            x0, end0 = self._drag
            self.end_t = end0 - (pos.x() - x0) / self._scale()
            self.update()
            return
        found = self.hit(pos.x(), pos.y())
        if found is None:
            QToolTip.hideText()
        else:
            QToolTip.showText(event.globalPosition().toPoint(), tip(self.describe(*found)), self)

    def mousePressEvent(self, event):  # noqa: N802
        pos = event.position()
        found = self.hit(pos.x(), pos.y())
        if found is not None:
            self.request_selected.emit(found[0].request_id)
        elif event.button() == Qt.LeftButton and pos.x() > self.LABEL:
            self.set_follow(False)
            self._drag = (pos.x(), self.end_t)

    def mouseReleaseEvent(self, event):  # noqa: N802
        self._drag = None

    def mouseDoubleClickEvent(self, event):  # noqa: N802
        self.set_follow(True)

    def wheelEvent(self, event):  # noqa: N802
        steps = event.angleDelta().y() / 120
        if steps:
            self.zoom(0.8 ** steps, event.position().x())
            event.accept()


class TimelinePanel(QWidget):
    """The timeline with its controls: zoom out / in, the span shown, follow now."""

    def __init__(self, view: TimelineView, parent: QWidget | None = None):
        super().__init__(parent)
        self.view = view
        self.zoom_out = QToolButton()
        self.zoom_out.setText("−")
        self.zoom_out.setToolTip("Show a longer time (or scroll the wheel on the timeline)")
        self.zoom_in = QToolButton()
        self.zoom_in.setText("+")
        self.zoom_in.setToolTip("Show a shorter time")
        self.follow = QToolButton()
        self.follow.setText("Follow now")
        self.follow.setCheckable(True)
        self.follow.setToolTip("Keep the present at the right edge (drag the timeline to "
                               "look back; double-click it to follow again)")
        self.span = QLabel()
        self.key = QLabel("pale: prefill · solid: decode · blue GPU, orange CPU, green remote, "
                          "purple read from disk, grey waiting on a tool")
        self.key.setWordWrap(True)
        self.key.setWordWrap(True)
        self.zoom_out.clicked.connect(lambda: view.zoom(1.25))
        self.zoom_in.clicked.connect(lambda: view.zoom(0.8))
        self.follow.toggled.connect(view.set_follow)
        view.view_changed.connect(self._show_view)
        controls = QHBoxLayout()
        controls.setContentsMargins(0, 0, 0, 0)
        for widget in (self.zoom_out, self.zoom_in, self.span, self.follow):
            controls.addWidget(widget)
        controls.addStretch(1)
        self.scroll = QScrollArea()  # many chats: the rows scroll, the axis stays on top
        self.scroll.setWidget(view)
        self.scroll.setWidgetResizable(True)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.scroll.verticalScrollBar().valueChanged.connect(lambda _: view.update())
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(controls)
        layout.addWidget(self.scroll, 1)
        layout.addWidget(self.key)
        self._show_view()
        # Following now, the bars move: repaint while something is live (4 Hz:
        # a bar grows a few pixels a second; the GUI thread draws the streams
        # too), slowly otherwise (the axis still moves), never while hidden.
        self._timer = QTimer(self)
        self._timer.setInterval(250)
        self._timer.timeout.connect(self._tick)
        self._timer.start()
        self._ticks = 0

    def _show_view(self) -> None:
        span = self.view.span_s
        self.span.setText(f"last {span:.0f} s" if span < 120 else f"last {span / 60:.0f} min")
        self.follow.blockSignals(True)
        self.follow.setChecked(self.view.follow)
        self.follow.blockSignals(False)

    def _tick(self) -> None:
        self._ticks += 1
        if not self.view.isVisible() or not self.view.follow:
            return
        if self.view.timeline.live or self._ticks % 8 == 0:
            self.view.update()
