"""The window and its models: a model that cannot load, loading another while
answers stream, quitting mid-load, the status bar while lanes warm up. Under
offscreen Qt, driven by qtbot, on the real engine."""

import threading
from pathlib import Path

from app.window.main_window import MainWindow
from app.store import ChatStore
from tests.test_warm_up import held_warm_up  # noqa: F401 (a fixture)
from tests.windows import stats_line


def test_a_model_asked_for_that_cannot_load_is_reported_not_replaced(qtbot, tmp_path):
    w = MainWindow(str(tmp_path / "missing.gguf"), store=ChatStore(tmp_path / "v.db"))
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: w.status.model_label.text() == "No model", timeout=30_000)
    assert "missing.gguf" in w.statusBar().currentMessage() and w.engine is None
    w.close()


def test_bad_model_path_shows_error_and_keeps_window(qtbot, tmp_path, monkeypatch,
                                                    tiny_model_dir):
    # A model that cannot load at start (gone since the last session, say):
    # the window says why and starts with the bundled model instead (here the
    # tiny model as a GGUF, where TANDEM_DEFAULT_MODEL puts the bundled one:
    # the real one's weights load in tests/test_default_model.py).
    from tests.test_gguf import write_gguf

    monkeypatch.setenv("TANDEM_DEFAULT_MODEL",
                       str(write_gguf(tiny_model_dir, tmp_path / "bundled.gguf")))
    w = MainWindow(str(tmp_path / "missing.gguf"), store=ChatStore(tmp_path / "t.db"),
                   fallback_model="default")
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.engine_ready, timeout=60_000):
        pass
    assert w.engine.model_info.source == "default"
    assert w.chat_tabs()[0].send_button.isEnabled()
    w.close()
    # If the bundled model cannot load either, the window stays, with no model.
    monkeypatch.setenv("TANDEM_DEFAULT_MODEL", str(tmp_path / "also-missing.gguf"))
    w = MainWindow(str(tmp_path / "missing.gguf"), store=ChatStore(tmp_path / "u.db"),
                   fallback_model="default")
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: w.status.model_label.text() == "No model", timeout=30_000)
    assert "also-missing.gguf" in w.statusBar().currentMessage()  # what failed, and where
    tab = w.chat_tabs()[0]
    assert not tab.send_button.isEnabled()
    w.close()


def test_failed_model_load_keeps_the_previous_model(qtbot, window, tmp_path):
    engine, label = window.engine, window.status.model_label.text()
    with qtbot.waitSignal(window.model_failed, timeout=30_000) as blocker:
        window.load_model(str(tmp_path / "missing.gguf"))
    assert "not found" in blocker.args[0]
    assert window.engine is engine and window.status.model_label.text() == label
    assert "Could not load the model" in window.statusBar().currentMessage()
    with qtbot.waitSignal(window.model_failed, timeout=30_000) as blocker:
        window.download_model("tandem-tests/definitely-not-cached")
    assert blocker.args[0].startswith("Offline:")  # no Hub here (make test: HF_HUB_OFFLINE)
    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("hello world")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    assert tab.conversation.messages[-1]["role"] == "assistant"


def test_loading_another_model_stops_streaming_answers(qtbot, slow_window, tiny_model_dir):
    window = slow_window
    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("the quick brown fox jumps over the lazy dog, and then the fox")
    tab.send()
    qtbot.waitUntil(lambda: len(tab.conversation.streaming_text or "") > 0, timeout=30_000)
    old = window.engine
    with qtbot.waitSignal(window.engine_ready, timeout=60_000):
        window.load_model(str(tiny_model_dir))
    assert window.engine is not old
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=10_000)
    assert "stopped" in stats_line(tab)


def test_quitting_while_a_model_loads_ends_cleanly(tmp_path, tiny_model_dir):
    """Quit during a load: the process exits 0, not with MLX aborting (-6)."""
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from PySide6.QtCore import QTimer
        from PySide6.QtWidgets import QApplication
        from app.window.main_window import MainWindow
        from app.store import ChatStore
        from engine import Engine, LaneSpec
        from engine.models.loader import load_model

        def slow(source):
            import mlx.core as mx
            engine = Engine(load_model(source), lanes=[LaneSpec("cpu", "cpu", "float32")])
            end = time.time() + 0.6  # still busy in MLX when the window closes (at 0.2 s)
            while time.time() < end:
                mx.eval(mx.random.normal((256, 256)) @ mx.random.normal((256, 256)))
            return engine

        app = QApplication([])
        w = MainWindow({str(tiny_model_dir)!r}, engine_factory=slow,
                       store=ChatStore({str(tmp_path / "q.db")!r}))
        w.show()
        QTimer.singleShot(200, w.close)
        app.exec()
        w.wait_for_engines()
        print("CLEAN", w.engine is None, flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, QT_QPA_PLATFORM="offscreen"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "CLEAN True" in done.stdout


def test_the_status_bar_shows_loading_until_every_lane_serves(qtbot, tiny_model_dir, tmp_path,
                                                              held_warm_up):
    """Loading, then the lanes getting ready (a GPU compiling its kernels is
    held here), then nothing: the bar goes when every lane serves."""
    from engine import Engine
    from engine.models.loader import load_model
    from tests.test_warm_up import TWO

    gate = held_warm_up["gpu"] = threading.Event()
    w = MainWindow(str(tiny_model_dir), store=ChatStore(tmp_path / "l.db"),
                   engine_factory=lambda source: Engine(load_model(source), lanes=TWO))
    qtbot.addWidget(w)
    assert not w.status.load_progress.isHidden() and w.status.model_label.text().startswith("Loading")
    with qtbot.waitSignal(w.engine_ready, timeout=60_000):
        pass
    qtbot.waitUntil(lambda: "GPU warming up" in w.status.load_progress.toolTip(), timeout=10_000)
    assert not w.status.load_progress.isHidden() and "GPU warming up" in w.status.load_label.text()
    gate.set()
    qtbot.waitUntil(lambda: w.status.load_progress.isHidden(), timeout=30_000)
    assert w.status.model_label.text() == w.engine.model_info.label and w.status.load_label.text() == ""
    w.close()
