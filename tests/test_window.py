"""The first window under offscreen Qt, driven by qtbot, on the real engine."""

import pytest
from PySide6.QtCore import Qt

from app.main_window import MainWindow
from engine import Engine, LaneSpec
from engine.loader import load_model


@pytest.fixture
def window(qtbot, tiny_model_dir):
    def factory(source):
        return Engine(load_model(source), lanes=[LaneSpec("cpu", "cpu", "float32")])

    w = MainWindow(str(tiny_model_dir), engine_factory=factory)
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.engine_ready, timeout=60_000):
        pass
    yield w
    w.close()


def test_type_send_and_stream(qtbot, window):
    tab = window.chat_tabs()[0]
    qtbot.keyClicks(tab.composer, "hello world, how are you today?")
    qtbot.keyClick(tab.composer, Qt.Key_Return)
    assert tab.is_streaming
    qtbot.waitUntil(lambda: bool(tab.streaming_text), timeout=30_000)
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    assert tab.messages[-1]["role"] == "assistant" and tab.messages[-1]["content"]
    assert "tokens" in tab.footer.text() and "CPU" in tab.footer.text()
    assert window.model_label.text() != "No model"


def test_stop_stops_streaming(qtbot, window):
    engine = window.engine
    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("the quick brown fox jumps over the lazy dog, and then the fox")
    qtbot.mouseClick(tab.send_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: len(tab.streaming_text or "") > 0, timeout=30_000)
    qtbot.mouseClick(tab.stop_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=30_000)
    assert "stopped" in tab.footer.text()
    assert tab.send_button.isEnabled()
    assert all(lane.is_idle for lane in engine.lanes.values())


def test_bad_model_path_shows_error_and_keeps_window(qtbot, tmp_path):
    w = MainWindow(str(tmp_path / "missing.gguf"))
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: w.model_label.text() == "No model", timeout=30_000)
    assert "not found" in w.statusBar().currentMessage()
    tab = w.chat_tabs()[0]
    assert not tab.send_button.isEnabled()
    w.close()
