"""Opening the real main window on the tiny model, for the GUI tests."""

from __future__ import annotations

import gc

from app.window.main_window import MainWindow
from app.store import ChatStore
from engine import Engine, LaneConfig, LaneSpec
from engine.models.loader import load_model


def cpu_engine(source):
    """One float32 CPU lane: the engine a GPU-less machine runs."""
    return Engine(load_model(source), lanes=[LaneSpec("cpu", "cpu", "float32")])


def paced_cpu_engine(seconds_per_step: float):
    """`cpu_engine` whose steps last at least `seconds_per_step`: the tiny model
    streams at human speed, so an answer is still streaming when a test acts."""
    def factory(source):
        return Engine(load_model(source), lanes=[LaneSpec(
            "cpu", "cpu", "float32", LaneConfig(min_step_s=seconds_per_step))])
    return factory


def open_window(qtbot, model_dir, db, factory=cpu_engine) -> MainWindow:
    """A main window on `db` whose engine is ready."""
    gc.collect()  # windows closed earlier die here, not on the loader thread (conftest.py)
    w = MainWindow(str(model_dir), engine_factory=factory,
                   store=db if isinstance(db, ChatStore) else ChatStore(db))
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.engine_ready, timeout=60_000):
        pass
    return w


def stats_line(tab) -> str:
    """The last answer's stats line (shown under it, once)."""
    conversation = tab.conversation
    return conversation.footers[len(conversation.messages) - 1]
