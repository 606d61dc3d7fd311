"""The window's status bar: the model, the mode, the devices, whether changes
wait to be saved, a missing OpenBLAS, and the Local server."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QProgressBar

from engine import openblas_advice

from app.window.saving_status import SavingStatus

MODE_TEXT = {"gpu-only": "GPU only", "hybrid": "Hybrid: GPU + CPU", "cpu-only": "CPU only"}


def mode_text(mode: str, engine=None) -> str:
    """'Hybrid: GPU + CPU', or what this engine's hybrid is made of ('Hybrid:
    CPU + remote')."""
    if engine is not None and getattr(engine, "is_remote_model", False):
        return "Remote model"
    if mode == "hybrid" and engine is not None:
        kinds = [lane.kind for lane in engine.lane_info() if lane.phase != "not routed"]
        parts = [k.upper() if k != "remote" else "remote" for k in ("gpu", "cpu", "remote")
                 if k in kinds]
        return "Hybrid: " + " + ".join(parts)
    return MODE_TEXT.get(mode, mode)


def local_mode(engine) -> str:
    """The mode that keeps everything on this machine's own lanes."""
    return "gpu-only" if any(lane.kind == "gpu" for lane in engine.lane_info()) else "cpu-only"


def can_hybrid(engine) -> bool:
    """A GPU lane and a second lane, or a routed remote lane."""
    lanes = [lane for lane in engine.lane_info() if lane.phase != "not routed"]
    return len(lanes) > 1 and any(lane.kind in ("gpu", "remote") for lane in lanes)


def show_engine_lanes(window, engine) -> None:
    """The devices, the mode and whether Ctrl+M has a mode to switch to."""
    window.device_label.setText(", ".join(f"{lane.name}: {lane.device.upper()}"
                                          for lane in engine.lane_info()))
    window.mode_label.setText(mode_text(engine.mode, engine))
    toggles = can_hybrid(engine)
    window.toggle_mode_action.setEnabled(toggles)  # Ctrl+M: nothing to toggle without one
    window.toggle_mode_action.setStatusTip(
        "" if toggles else "This engine runs CPU-only: no GPU lane or remote lane to switch to.")


def build_status_bar(window) -> None:
    """The labels, as the window's `model_label`, `mode_label`,
    `device_label`, `blas_label`, `server_label`, and its `saving` status."""
    bar = window.statusBar()
    window.load_progress = QProgressBar()  # busy while a model loads and its lanes warm up
    window.load_progress.setRange(0, 0)
    window.load_progress.setMaximumWidth(120)
    window.load_progress.setVisible(False)
    window.load_label = QLabel("")  # what the bar waits for (the model label stays the model)
    bar.addPermanentWidget(window.load_label)
    bar.addPermanentWidget(window.load_progress)
    window.model_label = QLabel("Loading model…")
    window.device_label = QLabel("")
    window.mode_label = QLabel("")
    for label in (window.model_label, window.mode_label, window.device_label):
        bar.addPermanentWidget(label)
    window.saving = SavingStatus(window.store, bar, window)
    advice = openblas_advice()
    window.blas_label = QLabel("⚠ slow CPU maths: OpenBLAS missing" if advice else "")
    if advice:  # the app works without it, only about 50x slower: say so once
        window.blas_label.setToolTip(advice)
        bar.addPermanentWidget(window.blas_label)
        bar.showMessage(advice, 30_000)
    window.server_label = QLabel("")
    bar.addPermanentWidget(window.server_label)
    window.bridge.lane_sample.connect(  # lanes warming up: the bar says which, until done
        lambda _: not window.load_progress.isHidden() and show_lanes_starting(window))


def show_loading(window, text: str) -> None:
    """A model is loading: say so, with a busy bar."""
    window.model_label.setText(text)
    window.load_progress.setVisible(True)
    window.load_progress.setToolTip(text)


def show_lanes_starting(window) -> None:
    """The engine is loaded; its lanes warm up (a GPU compiles its kernels):
    the bar stays, and says which, until every lane serves (or failed)."""
    engine = window.engine
    if engine is None:
        window.load_progress.setVisible(False)
        return
    starting = [f"{lane.name.upper()} {lane.phase}" for lane in engine.lane_info()
                if lane.phase in ("starting", "warming up", "calibrating")]
    window.load_progress.setVisible(bool(starting))
    text = "Getting ready: " + ", ".join(starting) if starting else ""
    window.load_progress.setToolTip(text)
    window.load_label.setText(text)
