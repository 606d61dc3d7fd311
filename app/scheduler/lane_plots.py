"""The Scheduler dock's live plots: a card per lane, each lane's utilisation
and tokens/s over the last minute, and the process's CPU and memory. Plots
draw in the window's colours and say which line is which in their titles
(a legend inside a plot covered its lines)."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QTimer
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout, QWidget

HISTORY_S = 60
SAMPLE_HZ = 10
SMOOTHING = 0.3
LANE_COLORS = {"gpu": "#2e86de", "cpu": "#e67e22", "remote": "#27ae60"}
REMOTE_PHASES = {"connecting": "connecting: not routed to until it answered a probe",
                 "down": "down: routed around until its back-off ends (hover for why)",
                 "retrying": "back-off over: the next request tries it",
                 "failed": "off (hover for why)"}


def nice_top(value: float) -> float:
    """The axis top for `value`: at least 1, rounded up to 1, 2 or 5 x 10^k."""
    import math

    if value <= 1.0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


def legend_title(title: str, entries: list[tuple[str, str]]) -> str:
    """'utilisation %  ■ gpu ■ cpu', each name in its line's colour."""
    keys = " ".join(f"<span style='color:{color}'>■&nbsp;{name}</span>"
                    for name, color in entries)
    return f"{title}&nbsp;&nbsp;<span style='font-size:9pt'>{keys}</span>"


class LaneCard(QFrame):
    """Device, utilisation, tokens/s, batch and queue of one lane."""

    def __init__(self, name: str, kind: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setFrameShape(QFrame.StyledPanel)
        color = LANE_COLORS.get(kind, "#888")
        self.title = QLabel(f"<b style='color:{color}'>{name.upper()}</b> lane ({kind})")
        self.numbers = QLabel("idle")
        self.numbers.setWordWrap(True)  # a long line wraps; it never widens the window
        self.matmul = QLabel()  # a CPU lane's: what its quantized layers run
        self.matmul.setWordWrap(True)
        self.matmul.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.addWidget(self.title)
        layout.addWidget(self.numbers)
        layout.addWidget(self.matmul)

    def show_matmul(self, what: str, why: str) -> None:
        """A CPU lane's matmul ("Tandem's kernels", "MLX's op", "a float32
        copy"), and why the probe chose it (the tooltip: its timings)."""
        self.matmul.setText(f"matmul: {what}")
        self.matmul.setToolTip(why)
        self.matmul.show()

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
        if sample.device == "remote":
            queued = f" · {sample.queue_depth} queued" if sample.queue_depth else ""
            self.numbers.setText(REMOTE_PHASES.get(phase, "") + queued if phase != "serving" else
                                 f"{sample.batch_size} in flight ({busy_pct:.0f}% of its "
                                 f"capacity) · {tokens_per_s:.1f} tok/s{queued}")
            return
        if phase in ("starting", "restarting", "warming up", "calibrating"):
            queued = f" · {sample.queue_depth} queued" if sample.queue_depth else ""
            self.numbers.setText(f"{phase}: not routed to until ready{queued}")
            return
        left = getattr(sample, "prefill_left", 0)
        prefill = f" · prefill {left:,} tokens to go" if left else ""
        drafted = getattr(sample, "drafted", 0)
        drafts = (f" · drafts: {sample.accepted_drafts:,} of {drafted:,} accepted"
                  if drafted else "")
        where = getattr(sample, "drafts_on", "")
        if where:  # "CPU: 4.0 ms a drafted token (against GPU 9.0)": the lane, the why
            drafts += f" · drafting on {where.split(':')[0]}"
            self.numbers.setToolTip(f"Draft model: {where}")
        self.numbers.setText(
            f"{busy_pct:.0f}% busy · {tokens_per_s:.1f} tok/s · "
            f"batch {sample.batch_size} · queue {sample.queue_depth} · "
            f"KV {sample.kv_bytes / 2**20:.1f} MiB{prefill}{drafts}")


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
        self._keys: list[tuple[str, str]] = []  # (lane, colour), named in the titles
        self.apply_palette()

    def add_lane(self, name: str, kind: str) -> None:
        if name in self._curves:  # the same lane of a reloaded model
            return
        n = len(self._t)
        self._util[name] = np.zeros(n)
        self._tps[name] = np.zeros(n)
        color = LANE_COLORS.get(kind, "#888")
        pen = pg.mkPen(color, width=1)
        self._curves[name] = (self.util_plot.plot(self._t, self._util[name], pen=pen),
                              self.tps_plot.plot(self._t, self._tps[name], pen=pen))
        self._keys.append((name, color))
        self.util_plot.setTitle(legend_title("utilisation %", self._keys))
        self.tps_plot.setTitle(legend_title("tokens/s", self._keys))
        self.apply_palette()
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
        top = nice_top(peak * 1.15)
        if top != self._tps_top:  # rarely: a new range lays the whole plot out again
            self._tps_top = top
            self.tps_plot.setYRange(0, top, padding=0)


class SystemPlots(ThemedPlots):
    """The process's CPU use and the engine's memory over the last minute."""

    INTERVAL_MS = 500

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        import psutil

        self.setMinimumHeight(170)
        self._process = psutil.Process()
        self._process.cpu_percent(None)
        n = HISTORY_S * 1000 // self.INTERVAL_MS
        self._t = np.linspace(-HISTORY_S, 0, n)
        self._series = {k: np.zeros(n) for k in ("cpu", "active", "peak", "kv")}
        self.cpu_plot = self.addPlot(title="process CPU %")
        self.nextRow()
        self.mem_plot = self.addPlot(title=legend_title("memory MiB", [
            ("MLX active", "#8e44ad"), ("peak", "#c0392b"), ("KV + prefix cache", "#16a085")]))
        for plot in (self.cpu_plot, self.mem_plot):
            plot.setXRange(-HISTORY_S, 0)
            plot.showGrid(x=True, y=True, alpha=0.2)
            plot.setMouseEnabled(x=False, y=False)
        self._curves = {
            "cpu": self.cpu_plot.plot(self._t, self._series["cpu"], pen=pg.mkPen("#27ae60")),
            "active": self.mem_plot.plot(self._t, self._series["active"],
                                         pen=pg.mkPen("#8e44ad")),
            "peak": self.mem_plot.plot(self._t, self._series["peak"],
                                       pen=pg.mkPen("#c0392b")),
            "kv": self.mem_plot.plot(self._t, self._series["kv"],
                                     pen=pg.mkPen("#16a085")),
        }
        self.apply_palette()
        self.engine = None
        self.timer = QTimer(self)  # the dock's memory line follows it too
        self.timer.setInterval(self.INTERVAL_MS)
        self.timer.timeout.connect(self.sample)
        self.timer.start()

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
