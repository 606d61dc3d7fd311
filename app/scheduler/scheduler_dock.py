"""The Scheduler dock: GPU-only / Hybrid switch, a card per lane, live plots of
each lane's utilisation and tokens/s over the last minute, and the decision log."""

from __future__ import annotations

import time

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtWidgets import (QButtonGroup, QGridLayout, QHBoxLayout, QHeaderView, QLabel,
                               QPushButton, QSplitter, QStyledItemDelegate, QStyleOptionViewItem,
                               QTableWidget, QTableWidgetItem,
                               QTabWidget, QVBoxLayout, QWidget)

from engine import format_bytes

from app.scheduler.hybrid_ledger import HybridLedger
from app.scheduler.lane_plots import LaneCard, LanePlots, SystemPlots
from app.ui.plain_text import plain, tip
from app.scheduler.timeline import Timeline
from app.scheduler.timeline_view import TimelinePanel, TimelineView

LOG_ROWS = 500
MODE_BUTTON_CSS = (  # palette() is read when applied: applied again when the theme changes
    "QPushButton { background: palette(button); color: palette(button-text); "
    "border: 1px solid palette(mid); border-radius: 3px; padding: 3px 12px; } "
    "QPushButton:checked { background: palette(highlight); "
    "color: palette(highlighted-text); border-color: palette(highlight); } "
    "QPushButton:disabled { color: palette(mid); }")


class OneLineDelegate(QStyledItemDelegate):
    """A cell on one line, elided (a tab's title), in a table whose rows wrap."""

    def initStyleOption(self, option, index):  # noqa: N802
        super().initStyleOption(option, index)
        option.features &= ~QStyleOptionViewItem.WrapText


class SchedulerDock(QWidget):
    mode_requested = Signal(str)
    request_selected = Signal(str)  # request id from the decision log

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        # What hybrid bought (or, with one lane, why it is off and what it needs).
        self.ledger = HybridLedger()
        self.gpu_lanes: set[str] = set()
        self.mode = "cpu-only"
        self._hybrid_off = ""
        self.hybrid_summary = plain(QLabel(""))
        self.hybrid_summary.setWordWrap(True)
        self.hybrid_summary.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.cards_box = QGridLayout()
        self.cards: dict[str, LaneCard] = {}
        self.plots = LanePlots()
        self.open_chats = 0
        self._plan = None
        layout = QVBoxLayout(self)
        layout.addLayout(self._mode_switch())
        layout.addWidget(self.hybrid_summary)
        layout.addLayout(self.cards_box)
        self.splitter = QSplitter(Qt.Vertical)  # plots over timeline, as the user drags it
        self.splitter.setObjectName("scheduler.plots-timeline")
        self.splitter.setChildrenCollapsible(False)
        self.splitter.addWidget(self._plot_tabs())
        lower = QTabWidget()
        lower.addTab(self._timeline_panel(), "Routing timeline")
        lower.addTab(self._decisions(), "Decisions")
        self.splitter.addWidget(lower)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        layout.addWidget(self.splitter, 1)
        self._started = time.monotonic()
        self._timer = QTimer(self)
        self._timer.setInterval(200)  # a minute of history needs no more (the GUI thread draws it)
        self._timer.timeout.connect(self.plots.redraw)
        self._timer.start()
        self.set_engine_info([], "cpu-only")

    def _mode_switch(self) -> QHBoxLayout:
        """GPU-only (CPU-only without a GPU lane) / Hybrid."""
        self.gpu_only = QPushButton("GPU-only")
        self.hybrid = QPushButton("Hybrid")
        self._mode_group = QButtonGroup(self)
        for button in (self.gpu_only, self.hybrid):
            button.setCheckable(True)
            # The mode in use stands out in light and dark alike.
            button.setStyleSheet(MODE_BUTTON_CSS)
            self._mode_group.addButton(button)
        self.local_mode = "gpu-only"  # "cpu-only" on a machine without a GPU lane
        self.gpu_only.clicked.connect(lambda: self.mode_requested.emit(self.local_mode))
        self.hybrid.clicked.connect(lambda: self.mode_requested.emit("hybrid"))
        switch = QHBoxLayout()
        switch.addWidget(QLabel("Mode:"))
        switch.addWidget(self.gpu_only)
        switch.addWidget(self.hybrid)
        switch.addStretch(1)
        return switch

    def _plot_tabs(self) -> QTabWidget:
        """The lanes' plots; the memory plan and use, above the machine's plots."""
        self.memory = QLabel("")
        self.memory.setWordWrap(True)
        self.memory.setTextInteractionFlags(Qt.TextSelectableByMouse)
        # What is used now, beside the plan's limits (which read as alarming alone).
        self.usage = QLabel("")
        self.usage.setWordWrap(True)
        self.system_plots = SystemPlots()
        self.system_plots.timer.timeout.connect(self.show_usage)
        self.plot_tabs = plot_tabs = QTabWidget()
        plot_tabs.addTab(self.plots, "Lanes")
        self.memory_tab = memory_tab = QWidget()
        memory_layout = QVBoxLayout(memory_tab)
        memory_layout.setContentsMargins(4, 4, 4, 4)
        memory_layout.addWidget(self.memory)
        memory_layout.addWidget(self.usage)
        memory_layout.addWidget(self.system_plots, 1)
        plot_tabs.addTab(memory_tab, "CPU && memory")
        return plot_tabs

    def _timeline_panel(self) -> QWidget:
        self.timeline = Timeline()
        self.timeline_view = TimelineView(self.timeline)
        self.timeline_view.request_selected.connect(self.request_selected.emit)
        self.timeline_panel = TimelinePanel(self.timeline_view)
        self.timeline_panel.setMinimumHeight(140)
        return self.timeline_panel

    def _decisions(self) -> QWidget:
        """The decision log, and the selected decision read in full below it."""
        self.log = QTableWidget(0, 5)
        self.log.setHorizontalHeaderLabels(["time", "tab", "phase", "lane", "reason"])
        header = self.log.horizontalHeader()
        one_line = OneLineDelegate(self.log)  # only the reason wraps
        stamp_width = self.fontMetrics().horizontalAdvance("00:00:00") + 12
        for col, width in enumerate((stamp_width, 96, 52, 44)):
            header.setSectionResizeMode(col, QHeaderView.Interactive)
            self.log.setColumnWidth(col, width)
            self.log.setItemDelegateForColumn(col, one_line)
        header.setSectionResizeMode(4, QHeaderView.Stretch)
        header.setMinimumSectionSize(36)
        self.log.verticalHeader().setVisible(False)
        self.log.setEditTriggers(QTableWidget.NoEditTriggers)
        self.log.setSelectionBehavior(QTableWidget.SelectRows)
        # The reason wraps in its row (it was cut at a few words); a row is as
        # tall as its reason, again when the column's width changes.
        self.log.setWordWrap(True)
        self.log.setTextElideMode(Qt.ElideRight)
        self.log.verticalHeader().setSectionResizeMode(QHeaderView.Interactive)
        self._rewrap = QTimer(self)
        self._rewrap.setSingleShot(True)
        self._rewrap.setInterval(100)
        self._rewrap.timeout.connect(self.log.resizeRowsToContents)
        header.sectionResized.connect(lambda *_: self._rewrap.start())
        self.log.itemSelectionChanged.connect(self._on_log_selection)
        # The reason column is narrow: the selected decision reads in full here.
        self.decision_detail = plain(QLabel("Select a decision to read why it was made."))
        self.decision_detail.setWordWrap(True)
        self.decision_detail.setTextInteractionFlags(Qt.TextSelectableByMouse)
        decisions = QWidget()
        decisions_layout = QVBoxLayout(decisions)
        decisions_layout.setContentsMargins(0, 0, 0, 0)
        decisions_layout.addWidget(self.log, 1)
        decisions_layout.addWidget(self.decision_detail)
        return decisions

    def set_engine_info(self, lanes: list[tuple[str, str]], mode: str,
                        descriptions: dict[str, str] | None = None,
                        off: dict[str, tuple[str, str]] | None = None) -> None:
        """Lanes as (name, kind); the switch needs a GPU lane to mean anything,
        and Hybrid also a second lane. `descriptions`: what each lane's cost
        model believes (card tooltips); `off`: lanes the memory plan left off,
        as name -> (kind, why)."""
        for card in self.cards.values():  # a new engine: cards start afresh
            self.cards_box.removeWidget(card)
            card.setParent(None)  # gone now, not at the next turn of the event loop
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
        remote = any(kind == "remote" for name, kind in lanes if name not in off)
        # The lanes hybrid is measured against: the GPU, else this machine's own.
        self.gpu_lanes = {name for name, kind in lanes
                          if kind == "gpu" or (not has_gpu and kind != "remote")}
        self.ledger.baseline, self.ledger.elsewhere = (
            ("the GPU", "the CPU" + (" or a remote" if remote else "")) if has_gpu
            else ("this machine", "a remote"))
        tip = self._set_switch(lanes, off, has_gpu, remote)
        for button in (self.gpu_only, self.hybrid):
            button.setToolTip(tip)
        self.show_mode(mode)

    def _set_switch(self, lanes, off, has_gpu: bool, remote: bool) -> str:
        """What the mode buttons can do with these lanes; returns their
        tooltip (and keeps why Hybrid is off, for the summary)."""
        self.local_mode = "gpu-only" if has_gpu else "cpu-only"
        self.gpu_only.setText("GPU-only" if has_gpu else "Local only")
        self.gpu_only.setEnabled(has_gpu or remote)
        self.hybrid.setEnabled((has_gpu and len(lanes) > 1) or remote)
        if lanes and all(kind == "remote" for _, kind in lanes):
            tip = self._hybrid_off = ("This model runs on a remote server: every request "
                                      "goes there, nothing is routed on this machine.")
            self.gpu_only.setEnabled(False)
            self.hybrid.setEnabled(False)
        elif remote and not has_gpu:
            tip = ("Hybrid sends a request to a remote lane when the router predicts it "
                   "finishes sooner there; Local only keeps every request on this machine.")
            self._hybrid_off = ""
        elif not has_gpu:
            tip = "No GPU that MLX can use on this machine: the engine runs CPU-only."
            self._hybrid_off = (
                "Hybrid is off: no GPU that MLX can use here, so every request runs on the "
                "CPU. It needs a GPU lane beside the CPU: Apple silicon (Metal), or an NVIDIA "
                "GPU with MLX's CUDA build; or a remote lane (Engine > Remote lanes…).")
        elif len(lanes) < 2:
            tip = "Hybrid needs a second lane: " + "; ".join(
                f"{name.upper()} is off ({why})" for name, (_, why) in off.items())
            self._hybrid_off = ("Hybrid is off: it needs a CPU lane beside the GPU, and "
                                + ("; ".join(f"{name.upper()} is off: {why}" for name, (_, why)
                                             in off.items()) or "this engine has none") + ".")
        else:
            tip = self._hybrid_off = ""
        return tip

    def show_engine(self, engine) -> None:
        """A newly loaded engine: its lanes, mode, memory plan and failures."""
        self.system_plots.engine = engine
        lanes = engine.lane_info()
        off = {lp.name: (lp.device, lp.reason) for lp in engine.memory_plan.lanes
               if not lp.enabled}
        off.update({lane.name: (lane.kind, lane.failed) for lane in lanes
                    if lane.phase == "not routed"})  # a remote serving another model
        self.set_engine_info(
            [(lane.name, lane.kind) for lane in lanes if lane.name not in off], engine.mode,
            engine.describe_lanes(), off=off)
        self.show_memory_plan(engine.memory_plan)
        for name, card in self.cards.items():
            try:
                matmul = engine.memory_plan.matmul(name)
            except KeyError:  # a remote lane: not in the plan
                continue
            if matmul:
                card.show_matmul(matmul, engine.memory_plan.cpu_matmul_why)
        for lane in lanes:
            if lane.failed:
                self.show_lane_failed(lane.name, lane.failed)

    def show_memory_plan(self, plan) -> None:
        """The engine's memory plan, one line each (engine/core/memory.py)."""
        self._plan = plan
        self.memory.setText("\n".join(plan.describe()))
        self.show_usage()
        self.memory.setToolTip("\n".join(f"{lp.name.upper()}: {lp.reason}" for lp in plan.lanes))

    def set_open_chats(self, count: int) -> None:
        self.open_chats = count
        self.show_usage()

    def show_usage(self) -> None:
        """'In use now: 551.0 MiB (KV and prefix cache 38.0 MiB); 3 open chats
        at their full context would need 1.1 GiB of KV'."""
        engine, plan = self.system_plots.engine, self._plan
        if engine is None or plan is None or not self.usage.isVisible():
            return  # only where it can be read: the GUI thread has streams to draw
        try:
            mem = engine.memory()
        except Exception:  # the engine is closing
            return
        line = (f"In use now: {format_bytes(mem['active'])} (KV and prefix cache "
                f"{format_bytes(mem['kv'] + mem['prefix_cache'])})")
        if plan.full_chat_bytes and self.open_chats:
            chats = "1 open chat" if self.open_chats == 1 else f"{self.open_chats} open chats"
            line += (f"; {chats} at the full context would need "
                     f"{format_bytes(self.open_chats * plan.full_chat_bytes)} of KV")
        self.usage.setText(line)

    def show_lane_failed(self, lane: str, why: str) -> None:
        card = self.cards.get(lane)
        if card is not None:
            card.show_off(why)

    def changeEvent(self, event):  # noqa: N802
        if event.type() == QEvent.PaletteChange and hasattr(self, "hybrid"):
            for button in (self.gpu_only, self.hybrid):
                button.setStyleSheet("")
                button.setStyleSheet(MODE_BUTTON_CSS)
        super().changeEvent(event)

    def show_mode(self, mode: str) -> None:
        self.mode = mode
        self.gpu_only.setChecked(mode == self.local_mode)
        self.hybrid.setChecked(mode == "hybrid")
        self.show_hybrid_summary()

    def show_hybrid_summary(self) -> None:
        """What hybrid bought over the last minutes (estimates, said so), or
        why it is off and what it would need."""
        if self._hybrid_off:
            text = self._hybrid_off
        elif self.mode == "cpu-only":
            text = ("Local only: every request runs on this machine. Hybrid would send "
                    "requests to a remote lane when the router predicts they finish sooner.")
        elif self.mode == "gpu-only":
            text = ("GPU-only: every request runs on the GPU. Hybrid would send follow-ups "
                    "and overflow to the CPU when the router predicts they finish sooner.")
        else:
            text = self.ledger.describe(time.monotonic())
        self.hybrid_summary.setText(text)

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

    def tool_waited(self, row: str, label: str, tool: str, start: float, end: float,
                    reason: str) -> None:
        """A chat waited on a tool call (app/chat/tool_rounds.py): its bar and log line."""
        self.timeline.tool_wait(row, label, tool, start, end, reason)
        self.timeline_view.refresh()
        self.add_decision(end, label, "tool", "", reason, "")

    def add_decision(self, when: float, tab: str, phase: str, lane: str, reason: str,
                     request_id: str) -> None:
        row = self.log.rowCount()
        self.log.insertRow(row)
        stamp = time.strftime("%H:%M:%S")
        for col, text in enumerate((stamp, tab, phase, lane.upper(), reason)):
            item = QTableWidgetItem(text)
            item.setData(Qt.UserRole, request_id)
            item.setTextAlignment(Qt.AlignLeft | Qt.AlignTop)
            if col in (1, 4):
                item.setToolTip(tip(text))
            self.log.setItem(row, col, item)
        self.log.resizeRowToContents(row)
        if self.log.rowCount() > LOG_ROWS:
            self.log.removeRow(0)
        self.log.scrollToBottom()

    def _on_log_selection(self) -> None:
        items = self.log.selectedItems()
        if items:
            row = items[0].row()
            cells = [self.log.item(row, col).text() for col in range(self.log.columnCount())]
            stamp, tab, phase, lane, reason = cells
            self.decision_detail.setText(f"{stamp} · {tab or 'request'} · {phase} "
                                         f"{lane.upper()}: {reason}")
            self.request_selected.emit(items[0].data(Qt.UserRole))
