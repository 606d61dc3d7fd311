"""Opening the real main window on the tiny model, for the GUI tests."""

from __future__ import annotations

from app.main_window import MainWindow
from app.store import ChatStore
from engine import Engine, LaneSpec
from engine.loader import load_model


def cpu_engine(source):
    """One float32 CPU lane: the engine a GPU-less machine runs."""
    return Engine(load_model(source), lanes=[LaneSpec("cpu", "cpu", "float32")])


def open_window(qtbot, model_dir, db, factory=cpu_engine) -> MainWindow:
    """A main window on `db` whose engine is ready."""
    w = MainWindow(str(model_dir), engine_factory=factory,
                   store=db if isinstance(db, ChatStore) else ChatStore(db))
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.engine_ready, timeout=60_000):
        pass
    return w
