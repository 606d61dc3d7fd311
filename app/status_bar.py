"""The window's status bar: the model, the mode, the devices, whether changes
wait to be saved, a missing OpenBLAS, and the Local server."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel

from engine import openblas_advice

from .saving_status import SavingStatus

MODE_TEXT = {"gpu-only": "GPU only", "hybrid": "Hybrid: GPU + CPU", "cpu-only": "CPU only"}


def mode_text(mode: str) -> str:
    return MODE_TEXT.get(mode, mode)


def build_status_bar(window) -> None:
    """The labels, as the window's `model_label`, `mode_label`,
    `device_label`, `blas_label`, `server_label`, and its `saving` status."""
    bar = window.statusBar()
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
