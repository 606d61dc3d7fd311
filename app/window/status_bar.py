"""The window's status bar: the model, the mode, the devices, whether changes
wait to be saved, a missing OpenBLAS, and the Local server."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar

from engine import openblas_advice

from app.window.saving_status import SavingStatus

MODE_TEXT = {"gpu-only": "GPU only", "hybrid": "Hybrid: GPU + CPU", "cpu-only": "CPU only"}


def mode_text(mode: str, engine=None) -> str:
    """'Hybrid: GPU + CPU', or what this engine's hybrid is made of ('Hybrid:
    CPU + remote'); 'Remote model' when every lane it routes to is remote."""
    if engine is None:
        return MODE_TEXT.get(mode, mode)
    kinds = [lane.kind for lane in engine.lane_info() if lane.phase != "not routed"]
    if kinds and set(kinds) == {"remote"}:
        return "Remote model"
    if mode == "hybrid":
        parts = [k.upper() if k != "remote" else "remote" for k in ("gpu", "cpu", "remote")
                 if k in kinds]
        return "Hybrid: " + " + ".join(parts)
    return MODE_TEXT.get(mode, mode)


def local_mode(engine) -> str:
    """The mode that keeps everything on this machine's own lanes."""
    return "gpu-only" if any(lane.kind == "gpu" for lane in engine.lane_info()) else "cpu-only"


def can_hybrid(engine) -> bool:
    """Hybrid is a mode of this engine, with a GPU lane and a second lane, or
    a routed remote lane."""
    if "hybrid" not in engine.capabilities.modes or local_mode(engine) not in \
            engine.capabilities.modes:
        return False
    lanes = [lane for lane in engine.lane_info() if lane.phase != "not routed"]
    return len(lanes) > 1 and any(lane.kind in ("gpu", "remote") for lane in lanes)


class StatusBar(QStatusBar):
    """The model (and a busy bar while it loads), the mode, the devices, the
    saving status, a missing OpenBLAS and the Local server."""

    def __init__(self, store, parent=None):
        super().__init__(parent)
        self.load_progress = QProgressBar()  # busy while a model loads and its lanes warm up
        self.load_progress.setRange(0, 0)
        self.load_progress.setMaximumWidth(120)
        self.load_progress.setVisible(False)
        self.load_label = QLabel("")  # what the bar waits for (the model label stays the model)
        self.addPermanentWidget(self.load_label)
        self.addPermanentWidget(self.load_progress)
        self.model_label = QLabel("Loading model…")
        self.device_label = QLabel("")
        self.mode_label = QLabel("")
        for label in (self.model_label, self.mode_label, self.device_label):
            self.addPermanentWidget(label)
        self.saving = SavingStatus(store, self, parent)
        advice = openblas_advice()
        self.blas_label = QLabel("⚠ slow CPU maths: OpenBLAS missing" if advice else "")
        if advice:  # the app works without it, only about 50x slower: say so once
            self.blas_label.setToolTip(advice)
            self.addPermanentWidget(self.blas_label)
            self.showMessage(advice, 30_000)
        self.server_label = QLabel("")
        self.addPermanentWidget(self.server_label)

    def show_engine_lanes(self, engine) -> None:
        """The devices and the mode."""
        self.device_label.setText(", ".join(f"{lane.name}: {lane.device.upper()}"
                                            for lane in engine.lane_info()))
        self.mode_label.setText(mode_text(engine.mode, engine))

    def show_mode(self, mode: str, engine) -> None:
        self.mode_label.setText(mode_text(mode, engine))

    def show_loading(self, text: str) -> None:
        """A model is loading: say so, with a busy bar."""
        self.model_label.setText(text)
        self.load_progress.setVisible(True)
        self.load_progress.setToolTip(text)

    def show_model(self, label: str) -> None:
        self.model_label.setText(label)

    def show_lanes_starting(self, engine) -> None:
        """The engine is loaded; its lanes warm up (a GPU compiles its kernels):
        the bar stays, and says which, until every lane serves (or failed)."""
        if engine is None:
            self.load_progress.setVisible(False)
            return
        starting = [f"{lane.name.upper()} {lane.phase}" for lane in engine.lane_info()
                    if lane.phase in ("starting", "warming up", "calibrating")]
        self.load_progress.setVisible(bool(starting))
        text = "Getting ready: " + ", ".join(starting) if starting else ""
        self.load_progress.setToolTip(text)
        self.load_label.setText(text)

    def is_loading(self) -> bool:
        return not self.load_progress.isHidden()
