"""The Scheduler dock on a real two-lane engine (one CPU lane acts as the GPU)."""

import pytest
from PySide6.QtCore import Qt

from app.main_window import MainWindow
from app.store import ChatStore
from engine import Engine, LaneSpec
from engine.loader import load_model
from engine.router import LeastLoadedPolicy


def _two_lane_factory(source):
    return Engine(load_model(source), lanes=[
        LaneSpec("gpu", "cpu", "float32", acts_as="gpu"), LaneSpec("cpu", "cpu", "float32")],
        policy=LeastLoadedPolicy(), mode="hybrid")


@pytest.fixture
def window(qtbot, tiny_model_dir, tmp_path):
    w = MainWindow(str(tiny_model_dir), engine_factory=_two_lane_factory,
                   store=ChatStore(tmp_path / "t.db"))
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.engine_ready, timeout=60_000):
        pass
    yield w
    w.close()


def _send_all(qtbot, window, tabs, texts):
    for tab, text in zip(tabs, texts):
        tab.composer.setPlainText(text)
        tab.send()
    qtbot.waitUntil(lambda: not any(t.is_streaming for t in tabs), timeout=60_000)


def _logged_lanes(dock, phase="prefill"):
    rows = range(dock.log.rowCount())
    return [dock.log.item(r, 3).text() for r in rows if dock.log.item(r, 2).text() == phase]


def test_mode_switch_changes_where_requests_go_and_the_dock_shows_it(qtbot, window):
    dock = window.scheduler
    assert dock.hybrid.isEnabled() and dock.hybrid.isChecked()
    assert set(dock.cards) == {"gpu", "cpu"}
    tabs = [window.chat_tabs()[0], window.new_chat(), window.new_chat()]
    _send_all(qtbot, window, tabs, ["hello world", "café", "numbers 0123456789"])
    qtbot.waitUntil(lambda: len(_logged_lanes(dock)) == 3, timeout=5_000)
    assert set(_logged_lanes(dock)) == {"gpu", "cpu"}  # hybrid spreads
    qtbot.mouseClick(dock.gpu_only, Qt.LeftButton)
    assert window.engine.mode == "gpu-only" and dock.gpu_only.isChecked()
    assert window.mode_label.text() == "gpu-only"
    _send_all(qtbot, window, tabs, ["and again?", "more", "tell me"])
    qtbot.waitUntil(lambda: len(_logged_lanes(dock)) == 6, timeout=5_000)
    assert _logged_lanes(dock)[3:] == ["gpu", "gpu", "gpu"]
    reasons = [dock.log.item(r, 4).text() for r in range(dock.log.rowCount())]
    assert all(reasons)
    qtbot.waitUntil(lambda: "tok/s" in dock.cards["gpu"].numbers.text(), timeout=5_000)


def test_selecting_a_log_row_brings_its_tab_forward(qtbot, window):
    import time

    from engine import Token

    # A slow observer paces the tiny model so the answer is still streaming.
    window.engine.subscribe(lambda e: time.sleep(0.02) if isinstance(e, Token) else None)
    first, second = window.chat_tabs()[0], window.new_chat()
    first.composer.setPlainText("the quick brown fox jumps over the lazy dog, and then the fox")
    first.send()
    qtbot.waitUntil(lambda: window.scheduler.log.rowCount() > 0, timeout=10_000)
    assert window.tabs.currentWidget() is second
    assert first.is_streaming
    window.scheduler.log.selectRow(0)
    assert window.tabs.currentWidget() is first
    window._stop(first)
    qtbot.waitUntil(lambda: not first.is_streaming, timeout=60_000)


def test_switch_is_disabled_without_a_gpu(qtbot, tiny_model_dir, tmp_path):
    def factory(source):
        return Engine(load_model(source), lanes=[LaneSpec("cpu", "cpu", "float32")])

    w = MainWindow(str(tiny_model_dir), engine_factory=factory, store=ChatStore(tmp_path / "x.db"))
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.engine_ready, timeout=60_000):
        pass
    assert not w.scheduler.hybrid.isEnabled()
    assert "CPU-only" in w.scheduler.hybrid.toolTip()
    assert w.engine.mode == "cpu-only"
    w.close()
