"""The Scheduler dock: GPU-only / Hybrid switch, a card per lane, live plots of
each lane's utilisation and tokens/s over the last minute, and the decision log."""

from __future__ import annotations

import time

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (QButtonGroup, QFrame, QGridLayout, QHBoxLayout, QHeaderView, QLabel,
                               QPushButton, QScrollArea, QTableWidget, QTableWidgetItem,
                               QTabWidget, QVBoxLayout, QWidget)

from .timeline import Timeline, TimelineView

HISTORY_S = 60
SAMPLE_HZ = 10
LOG_ROWS = 500
SMOOTHING = 0.3
LANE_COLORS = {"gpu": "#2e86de", "cpu": "#e67e22"}


class LaneCard(QFrame):
    """Device, utilisation, tokens/s, batch and queue of one lane."""

    def __init__(self, name: str, kind: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setFrameShape(QFrame.StyledPanel)
        color = LANE_COLORS.get(kind, "#888")
        self.title = QLabel(f"<b style='color:{color}'>{name.upper()}</b> lane ({kind})")
        self.numbers = QLabel("idle")
        self.numbers.setWordWrap(True)  # a long line wraps; it never widens the window
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.addWidget(self.title)
        layout.addWidget(self.numbers)

    def show_off(self, why: str) -> None:
        """The lane does not run (no memory for it, or it failed): say why."""
        self.off = True
        self.setEnabled(False)
        self.numbers.setText(f"off: {why}")
        self.numbers.setWordWrap(True)
        self.setToolTip(why)

    def show_sample(self, sample, busy_pct: float, tokens_per_s: float) -> None:
        if getattr(self, "off", False):
            return
        phase = getattr(sample, "phase", "serving")
        if phase in ("starting", "warming up", "calibrating"):
            queued = f" · {sample.queue_depth} queued" if sample.queue_depth else ""
            self.numbers.setText(f"{phase}: not routed to until ready{queued}")
            return
        left = getattr(sample, "prefill_left", 0)
        prefill = f" · prefill {left:,} tokens to go" if left else ""
        self.numbers.setText(
            f"{busy_pct:.0f}% busy · {tokens_per_s:.1f} tok/s · "
            f"batch {sample.batch_size} · queue {sample.queue_depth} · "
            f"KV {sample.kv_bytes / 2**20:.1f} MiB{prefill}")


class ThemedPlots(pg.GraphicsLayoutWidget):
    """Plots drawn in the window's colours, following light / dark changes."""

    def apply_palette(self) -> None:
        if not hasattr(self, "ci"):  # palette events arrive during construction
            return
        palette = self.palette()
        self.setBackground(palette.color(QPalette.Base))
        text = palette.color(QPalette.Text)
        for item in self.ci.items:
            if isinstance(item, pg.PlotItem):
                item.setTitle(item.titleLabel.text, color=text)
                for axis in ("left", "bottom"):
                    item.getAxis(axis).setPen(text)
                    item.getAxis(axis).setTextPen(text)

    def changeEvent(self, event):  # noqa: N802
        if event.type() == QEvent.PaletteChange:
            self.apply_palette()
        super().changeEvent(event)


class LanePlots(ThemedPlots):
    """Per-lane utilisation and tokens/s; ring buffers, items created once."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setMinimumHeight(220)
        n = HISTORY_S * SAMPLE_HZ
        self._t = np.linspace(-HISTORY_S, 0, n)
        self._util: dict[str, np.ndarray] = {}
        self._tps: dict[str, np.ndarray] = {}
        self._curves: dict[str, tuple] = {}
        self._dirty = True  # pushed samples not drawn yet
        self.util_plot = self.addPlot(title="utilisation %")
        self.util_plot.setYRange(0, 100)
        self.util_plot.setXRange(-HISTORY_S, 0)
        self.nextRow()
        self.tps_plot = self.addPlot(title="tokens/s")
        self.tps_plot.setXRange(-HISTORY_S, 0)
        self._tps_top = 0.0
        for plot in (self.util_plot, self.tps_plot):
            plot.showGrid(x=True, y=True, alpha=0.2)
            plot.setMouseEnabled(x=False, y=False)
        self.util_plot.addLegend(offset=(5, 5))
        self.apply_palette()

    def add_lane(self, name: str, kind: str) -> None:
        if name in self._curves:  # the same lane of a reloaded model
            return
        n = len(self._t)
        self._util[name] = np.zeros(n)
        self._tps[name] = np.zeros(n)
        pen = pg.mkPen(LANE_COLORS.get(kind, "#888"), width=1)
        self._curves[name] = (self.util_plot.plot(self._t, self._util[name], pen=pen, name=name),
                              self.tps_plot.plot(self._t, self._tps[name], pen=pen))
        self._dirty = True

    def push(self, sample) -> None:
        if sample.lane not in self._util:
            return
        for buf, value in ((self._util[sample.lane], sample.busy_fraction * 100),
                           (self._tps[sample.lane], sample.tokens_per_s)):
            if value or buf.any():  # a minute of idle zeros scrolls into itself: no redraw
                self._dirty = True
            buf[:-1] = buf[1:]
            # Samples come every 100 ms, shorter than one step on a slow lane;
            # a light exponential smoothing shows the trend, not step aliasing.
            buf[-1] = SMOOTHING * value + (1 - SMOOTHING) * buf[-2]

    def latest(self, lane: str) -> tuple[float, float]:
        """Smoothed (utilisation %, tokens/s) of a lane."""
        return float(self._util[lane][-1]), float(self._tps[lane][-1])

    def redraw(self) -> None:
        """Draw what changed since the last redraw; nothing while hidden or
        while every lane has been idle for the whole minute shown."""
        if not self._dirty or not self.isVisible():
            return
        self._dirty = False
        for name, (util_curve, tps_curve) in self._curves.items():
            util_curve.setData(self._t, self._util[name], skipFiniteCheck=True)
            tps_curve.setData(self._t, self._tps[name], skipFiniteCheck=True)
        # From 0 to a little above the peak: never a negative axis, and an idle
        # minute shows 0..1 rather than auto-range's -0.4..0.4 around zero.
        peak = max((float(buf.max()) for buf in self._tps.values()), default=0.0)
        top = max(1.0, peak * 1.15)
        if top != self._tps_top:
            self._tps_top = top
            self.tps_plot.setYRange(0, top, padding=0)


class SystemPlots(ThemedPlots):
    """The process's CPU use and the engine's memory over the last minute."""

    INTERVAL_MS = 500

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        import psutil

        self.setMinimumHeight(150)
        self._process = psutil.Process()
        self._process.cpu_percent(None)
        n = HISTORY_S * 1000 // self.INTERVAL_MS
        self._t = np.linspace(-HISTORY_S, 0, n)
        self._series = {k: np.zeros(n) for k in ("cpu", "active", "peak", "kv")}
        self.cpu_plot = self.addPlot(title="process CPU %")
        self.nextRow()
        self.mem_plot = self.addPlot(title="memory MiB")
        self.mem_plot.addLegend(offset=(5, 5))
        for plot in (self.cpu_plot, self.mem_plot):
            plot.setXRange(-HISTORY_S, 0)
            plot.showGrid(x=True, y=True, alpha=0.2)
            plot.setMouseEnabled(x=False, y=False)
        self._curves = {
            "cpu": self.cpu_plot.plot(self._t, self._series["cpu"], pen=pg.mkPen("#27ae60")),
            "active": self.mem_plot.plot(self._t, self._series["active"],
                                         pen=pg.mkPen("#8e44ad"), name="MLX active"),
            "peak": self.mem_plot.plot(self._t, self._series["peak"],
                                       pen=pg.mkPen("#c0392b"), name="MLX peak"),
            "kv": self.mem_plot.plot(self._t, self._series["kv"],
                                     pen=pg.mkPen("#16a085"), name="KV + prefix cache"),
        }
        self.apply_palette()
        self.engine = None
        self._timer = QTimer(self)
        self._timer.setInterval(self.INTERVAL_MS)
        self._timer.timeout.connect(self.sample)
        self._timer.start()

    def sample(self) -> None:
        values = {"cpu": self._process.cpu_percent(None)}
        if self.engine is not None:
            mem = self.engine.memory()
            values.update(active=mem["active"] / 2**20, peak=mem["peak"] / 2**20,
                          kv=(mem["kv"] + mem["prefix_cache"]) / 2**20)
        shown = self.isVisible()
        for key, value in values.items():
            buf = self._series[key]
            buf[:-1] = buf[1:]
            buf[-1] = value
            if shown:  # recorded either way; drawn only where someone can see it
                self._curves[key].setData(self._t, buf, skipFiniteCheck=True)

    def latest(self, key: str) -> float:
        return float(self._series[key][-1])


class SchedulerDock(QWidget):
    mode_requested = Signal(str)
    request_selected = Signal(str)  # request id from the decision log

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.gpu_only = QPushButton("GPU-only")
        self.hybrid = QPushButton("Hybrid")
        self._mode_group = QButtonGroup(self)
        for button in (self.gpu_only, self.hybrid):
            button.setCheckable(True)
            self._mode_group.addButton(button)
        self.gpu_only.clicked.connect(lambda: self.mode_requested.emit("gpu-only"))
        self.hybrid.clicked.connect(lambda: self.mode_requested.emit("hybrid"))
        switch = QHBoxLayout()
        switch.addWidget(QLabel("Mode:"))
        switch.addWidget(self.gpu_only)
        switch.addWidget(self.hybrid)
        switch.addStretch(1)
        self.cards_box = QGridLayout()
        self.cards: dict[str, LaneCard] = {}
        self.plots = LanePlots()
        self.log = QTableWidget(0, 5)
        self.log.setHorizontalHeaderLabels(["time", "tab", "phase", "lane", "reason"])
        header = self.log.horizontalHeader()
        for col, width in enumerate((64, 110, 56, 80)):
            header.setSectionResizeMode(col, QHeaderView.Interactive)
            self.log.setColumnWidth(col, width)
        header.setSectionResizeMode(4, QHeaderView.Stretch)
        header.setMinimumSectionSize(40)
        self.log.verticalHeader().setVisible(False)
        self.log.setEditTriggers(QTableWidget.NoEditTriggers)
        self.log.setSelectionBehavior(QTableWidget.SelectRows)
        self.log.setWordWrap(False)
        self.log.verticalHeader().setDefaultSectionSize(22)
        self.log.itemSelectionChanged.connect(self._on_log_selection)
        # The reason column is narrow: the selected decision reads in full here.
        self.decision_detail = QLabel("Select a decision to read why it was made.")
        self.decision_detail.setWordWrap(True)
        self.decision_detail.setTextInteractionFlags(Qt.TextSelectableByMouse)
        decisions = QWidget()
        decisions_layout = QVBoxLayout(decisions)
        decisions_layout.setContentsMargins(0, 0, 0, 0)
        decisions_layout.addWidget(self.log, 1)
        decisions_layout.addWidget(self.decision_detail)
        self.memory = QLabel("")
        self.memory.setWordWrap(True)
        self.memory.setTextInteractionFlags(Qt.TextSelectableByMouse)
        layout = QVBoxLayout(self)
        layout.addLayout(switch)
        layout.addLayout(self.cards_box)
        layout.addWidget(self.memory)
        self.system_plots = SystemPlots()
        plot_tabs = QTabWidget()
        plot_tabs.addTab(self.plots, "Lanes")
        plot_tabs.addTab(self.system_plots, "CPU && memory")
        layout.addWidget(plot_tabs, 2)
        self.timeline = Timeline()
        self.timeline_view = TimelineView(self.timeline)
        self.timeline_view.request_selected.connect(self.request_selected.emit)
        self.timeline_scroll = QScrollArea()
        self.timeline_scroll.setWidget(self.timeline_view)
        self.timeline_scroll.setWidgetResizable(False)
        self.timeline_scroll.setToolTip("Light: prefill, solid: decode; blue GPU, orange CPU")
        self.timeline_scroll.setMinimumHeight(120)
        lower = QTabWidget()
        lower.addTab(self.timeline_scroll, "Routing timeline")
        lower.addTab(decisions, "Decisions")
        layout.addWidget(lower, 2)
        self._started = time.monotonic()
        self._timer = QTimer(self)
        self._timer.setInterval(50)
        self._timer.timeout.connect(self.plots.redraw)
        self._timer.timeout.connect(self._grow_timeline)
        self._timer.start()
        self.set_engine_info([], "cpu-only")

    def set_engine_info(self, lanes: list[tuple[str, str]], mode: str,
                        descriptions: dict[str, str] | None = None,
                        off: dict[str, tuple[str, str]] | None = None) -> None:
        """Lanes as (name, kind); the switch needs a GPU lane to mean anything,
        and Hybrid also a second lane. `descriptions`: what each lane's cost
        model believes (card tooltips); `off`: lanes the memory plan left off,
        as name -> (kind, why)."""
        for card in self.cards.values():  # a new engine: cards start afresh
            self.cards_box.removeWidget(card)
            card.deleteLater()
        self.cards.clear()
        off = off or {}
        for name, kind in lanes + [(name, kind) for name, (kind, _) in off.items()]:
            card = LaneCard(name, kind)
            self.cards[name] = card
            self.cards_box.addWidget(card, len(self.cards) - 1, 0)
            if name in off:
                card.show_off(off[name][1])
            else:
                self.plots.add_lane(name, kind)
                card.setToolTip((descriptions or {}).get(name, ""))
        self.timeline_view.lane_kinds = dict(lanes)
        has_gpu = any(kind == "gpu" for _, kind in lanes)
        self.gpu_only.setEnabled(has_gpu)
        self.hybrid.setEnabled(has_gpu and len(lanes) > 1)
        if not has_gpu:
            tip = "No GPU that MLX can use on this machine: the engine runs CPU-only."
        elif len(lanes) < 2:
            tip = "Hybrid needs a second lane: " + "; ".join(
                f"{name.upper()} is off ({why})" for name, (_, why) in off.items())
        else:
            tip = ""
        for button in (self.gpu_only, self.hybrid):
            button.setToolTip(tip)
        self.show_mode(mode)

    def show_engine(self, engine) -> None:
        """A newly loaded engine: its lanes, mode, memory plan and failures."""
        self.system_plots.engine = engine
        lanes = engine.lane_info()
        self.set_engine_info(
            [(lane.name, lane.kind) for lane in lanes], engine.mode,
            engine.describe_lanes(), off={
                lp.name: (lp.device, lp.reason) for lp in engine.memory_plan.lanes
                if not lp.enabled})
        self.show_memory_plan(engine.memory_plan)
        for lane in lanes:
            if lane.failed:
                self.show_lane_failed(lane.name, lane.failed)

    def show_memory_plan(self, plan) -> None:
        """The engine's memory plan, one line each (engine/core/memory.py)."""
        self.memory.setText("\n".join(plan.describe()))
        self.memory.setToolTip("\n".join(f"{lp.name.upper()}: {lp.reason}" for lp in plan.lanes))

    def show_lane_failed(self, lane: str, why: str) -> None:
        card = self.cards.get(lane)
        if card is not None:
            card.show_off(why)

    def show_mode(self, mode: str) -> None:
        self.gpu_only.setChecked(mode == "gpu-only")
        self.hybrid.setChecked(mode == "hybrid")

    def on_lane_sample(self, sample) -> None:
        self.plots.push(sample)
        card = self.cards.get(sample.lane)
        if card is not None:
            phase = getattr(sample, "phase", "serving")
            engine = self.system_plots.engine
            if phase != getattr(card, "phase", None) and engine is not None:
                card.phase = phase  # warmed up (or failed): what the router believes now
                card.setToolTip(engine.describe_lanes().get(sample.lane, ""))
            card.show_sample(sample, *self.plots.latest(sample.lane))

    def add_decision(self, when: float, tab: str, phase: str, lane: str, reason: str,
                     request_id: str) -> None:
        row = self.log.rowCount()
        self.log.insertRow(row)
        stamp = time.strftime("%H:%M:%S")
        for col, text in enumerate((stamp, tab, phase, lane, reason)):
            item = QTableWidgetItem(text)
            item.setData(Qt.UserRole, request_id)
            if col == 4:
                item.setToolTip(reason)
            self.log.setItem(row, col, item)
        if self.log.rowCount() > LOG_ROWS:
            self.log.removeRow(0)
        self.log.scrollToBottom()

    def _grow_timeline(self) -> None:
        if any(t.finished is None for t in self.timeline.tracks.values()):
            self.timeline_view.refresh()
            bar = self.timeline_scroll.horizontalScrollBar()
            bar.setValue(bar.maximum())

    def _on_log_selection(self) -> None:
        items = self.log.selectedItems()
        if items:
            row = items[0].row()
            cells = [self.log.item(row, col).text() for col in range(self.log.columnCount())]
            stamp, tab, phase, lane, reason = cells
            self.decision_detail.setText(f"{stamp} · {tab or 'request'} · {phase} "
                                         f"{lane.upper()}: {reason}")
            self.request_selected.emit(items[0].data(Qt.UserRole))
