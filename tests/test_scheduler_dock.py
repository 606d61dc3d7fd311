"""The Scheduler dock on a real two-lane engine (one CPU lane acts as the GPU)."""

import pytest
from PySide6.QtCore import QPoint, Qt

from app.window.main_window import MainWindow
from app.store import ChatStore
from engine import Engine, LaneConfig, LaneSpec
from engine.core.memory import format_bytes
from engine.core.router import LeastLoadedPolicy
from engine.models.loader import load_model
from tests.windows import open_window, stats_line


def _two_lane_factory(source, config: LaneConfig | None = None):
    return Engine(load_model(source), lanes=[
        LaneSpec("gpu", "cpu", "float32", config, acts_as="gpu"),
        LaneSpec("cpu", "cpu", "float32", config)], policy=LeastLoadedPolicy(), mode="hybrid")


@pytest.fixture
def window(qtbot, tiny_model_dir, tmp_path):
    w = open_window(qtbot, tiny_model_dir, tmp_path / "t.db", _two_lane_factory)
    yield w
    w.close()


def _send_all(qtbot, window, tabs, texts):
    for tab, text in zip(tabs, texts):
        tab.composer.setPlainText(text)
        tab.send()
    qtbot.waitUntil(lambda: not any(t.is_streaming for t in tabs), timeout=60_000)


def _logged_lanes(dock, phase="prefill"):
    rows = range(dock.log.rowCount())
    return [dock.log.item(r, 3).text().lower() for r in rows if dock.log.item(r, 2).text() == phase]


def test_mode_switch_changes_where_requests_go_and_the_dock_shows_it(qtbot, window):
    dock = window.scheduler
    assert dock.hybrid.isEnabled() and dock.hybrid.isChecked()
    assert set(dock.cards) == {"gpu", "cpu"}
    for name, card in dock.cards.items():  # what the router believes of each lane, once warm
        qtbot.waitUntil(lambda: "prefill" in card.toolTip(), timeout=60_000)
        tip = card.toolTip()
        assert "prefill" in tip and "tok/s" in tip and "contention" in tip
        assert tip == window.engine.describe_lanes()[name]
    tabs = [window.chat_tabs()[0], window.new_chat(), window.new_chat()]
    _send_all(qtbot, window, tabs, ["hello world", "café", "numbers 0123456789"])
    qtbot.waitUntil(lambda: len(_logged_lanes(dock)) == 3, timeout=5_000)
    assert set(_logged_lanes(dock)) == {"gpu", "cpu"}  # hybrid spreads
    qtbot.mouseClick(dock.gpu_only, Qt.LeftButton)
    assert window.engine.mode == "gpu-only" and dock.gpu_only.isChecked()
    assert window.status.mode_label.text() == "GPU only"
    _send_all(qtbot, window, tabs, ["and again?", "more", "tell me"])
    qtbot.waitUntil(lambda: len(_logged_lanes(dock)) == 6, timeout=5_000)
    assert _logged_lanes(dock)[3:] == ["gpu", "gpu", "gpu"]
    reasons = [dock.log.item(r, 4).text() for r in range(dock.log.rowCount())]
    assert all(reasons)
    qtbot.waitUntil(lambda: "tok/s" in dock.cards["gpu"].numbers.text(), timeout=5_000)


def test_selecting_a_log_row_brings_its_tab_forward(qtbot, tiny_model_dir, tmp_path):
    # Steps of 20 ms pace the tiny model so the answer is still streaming.
    window = open_window(qtbot, tiny_model_dir, tmp_path / "t.db",
                         lambda source: _two_lane_factory(source, LaneConfig(min_step_s=0.02)))
    first, second = window.chat_tabs()[0], window.new_chat()
    first.composer.setPlainText("the quick brown fox jumps over the lazy dog, and then the fox")
    first.send()
    qtbot.waitUntil(lambda: window.scheduler.log.rowCount() > 0, timeout=10_000)
    assert window.tabs.currentWidget() is second
    assert first.is_streaming
    window.scheduler.log.selectRow(0)
    assert window.tabs.currentWidget() is first
    window.stop(first)
    qtbot.waitUntil(lambda: not first.is_streaming, timeout=60_000)
    window.close()


def test_switch_is_disabled_without_a_gpu(qtbot, tiny_model_dir, tmp_path):
    def factory(source):
        return Engine(load_model(source), lanes=[LaneSpec("cpu", "cpu", "float32")])

    w = MainWindow(str(tiny_model_dir), engine_factory=factory, store=ChatStore(tmp_path / "x.db"))
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.engine_ready, timeout=60_000):
        pass
    assert not w.scheduler.hybrid.isEnabled()
    assert "CPU-only" in w.scheduler.hybrid.toolTip()
    summary = w.scheduler.hybrid_summary.text()  # why hybrid is off, and what it would need
    assert summary.startswith("Hybrid is off: no GPU that MLX can use here")
    assert "needs a GPU lane beside the CPU" in summary
    assert not w.menus.toggle_mode_action.isEnabled()  # Ctrl+M: nothing to toggle
    assert "CPU-only" in w.menus.toggle_mode_action.statusTip()
    assert w.engine.mode == "cpu-only" and w.status.mode_label.text() == "CPU only"
    # Ctrl+M, or anything else asking for a GPU mode, leaves it CPU-only and says why.
    w.set_mode("gpu-only")
    assert w.engine.mode == "cpu-only" and w.status.mode_label.text() == "CPU only"
    assert "no GPU lane" in w.statusBar().currentMessage()
    w.close()


def test_decision_reasons_read_in_full_and_idle_rates_start_at_zero(qtbot, window):
    dock = window.scheduler
    dock.add_decision(0.0, "a tab", "decode", "cpu", "because " + "of a long reason " * 20, "r1")
    dock.log.selectRow(0)
    assert dock.decision_detail.text().endswith("of a long reason " * 19 + "of a long reason ")
    assert dock.decision_detail.wordWrap()
    dock.plots.redraw()  # an idle engine: every rate is zero
    low, high = dock.plots.tps_plot.viewRange()[1]
    assert low == 0 and high >= 1


def test_timeline_has_a_row_per_chat_and_a_click_opens_the_answer(qtbot, window):
    tabs = [window.chat_tabs()[0], window.new_chat()]
    _send_all(qtbot, window, tabs, ["hello world", "café"])
    _send_all(qtbot, window, tabs[:1], ["and then?"])  # a second request of the first chat
    timeline = window.scheduler.timeline
    qtbot.waitUntil(lambda: len(timeline.tracks) == 3
                    and all(t.finished for t in timeline.tracks.values()), timeout=10_000)
    for track in timeline.tracks.values():
        phases = [s.phase for s in track.segments]
        assert phases[0] == "prefill" and "decode" in phases
        assert all(s.end is not None and s.end >= s.start for s in track.segments)
        assert track.segments[0].reason  # the router's reason, for the hover
    rows = timeline.row_tracks()  # one row per chat, in the order they were first routed
    assert {label: len(tracks) for label, tracks in rows} == {"hello world": 2, "café": 1}
    first_row = [label for label, _ in rows].index("hello world")
    view = window.scheduler.timeline_view
    window.show()
    view.span_s = 10.0  # the tiny model's answers take milliseconds: zoom in on them
    lane_colours = {view.color(lane, phase).name() for lane in ("gpu", "cpu")
                    for phase in ("prefill", "decode")}
    image = view.grab().toImage()
    y = view.AXIS + first_row * view.ROW + view.ROW // 2
    colours = {image.pixelColor(x, y).name() for x in range(view.LABEL, image.width())}
    assert colours & lane_colours  # something drawn in a lane colour on that chat's row
    # Clicking a request brings its chat forward, at that answer.
    window.tabs.setCurrentWidget(tabs[1])
    scrolled = []
    tabs[0].scroll_to = lambda message_id: scrolled.append(message_id)
    with qtbot.waitSignal(view.request_selected) as blocker:
        qtbot.mouseClick(view, Qt.LeftButton, pos=QPoint(4, y))  # the row's label
    assert blocker.args == [rows[first_row][1][-1].request_id]  # its latest request
    assert window.tabs.currentWidget() is tabs[0]
    assert scrolled == [window.store.messages(tabs[0].chat_id)[-1].id]  # that answer


def test_system_plots_show_cpu_and_engine_memory(qtbot, window):
    plots = window.scheduler.system_plots
    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("hello world")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    plots.sample()
    assert plots.latest("active") > 0 and plots.latest("peak") >= plots.latest("active")
    assert plots.latest("kv") > 0  # the finished turn sits in the prefix cache
    assert plots.latest("cpu") >= 0


def test_plots_follow_the_palette(qtbot, window):
    from PySide6.QtGui import QColor, QPalette

    plots = window.scheduler.plots
    palette = plots.palette()
    palette.setColor(QPalette.Base, QColor("#202124"))
    plots.setPalette(palette)
    assert plots.backgroundBrush().color().name() == "#202124"
    palette.setColor(QPalette.Base, QColor("#fafafa"))
    plots.setPalette(palette)
    assert plots.backgroundBrush().color().name() == "#fafafa"


def _second_lane_without_memory(source):
    """Two lanes on a budget with room for one lane's KV only."""
    from engine.runtime.weights import model_shape

    loaded = load_model(source)
    weights = model_shape(loaded.model, loaded.context_length).weight_bytes
    return Engine(loaded, lanes=[LaneSpec("gpu", "cpu", "float32", acts_as="gpu"),
                                 LaneSpec("cpu", "cpu", "float32")],
                  memory_budget_bytes=weights + (512 << 20) + (5 << 19))


def test_the_dock_shows_the_memory_plan_and_a_lane_left_off(qtbot, tiny_model_dir, tmp_path):
    w = open_window(qtbot, tiny_model_dir, tmp_path / "t.db", _second_lane_without_memory)
    try:
        dock, plan = w.scheduler, w.engine.memory_plan
        assert not plan.lane("cpu").enabled and plan.lane("gpu").enabled
        assert list(w.engine.lanes) == ["gpu"]
        assert "KV" in dock.memory.text() and "per token" in dock.memory.text()
        assert dock.memory.text() == "\n".join(plan.describe())
        # Beside the plan's limits, what is used now and what the open chats could take.
        w.new_chat()
        w.show()
        dock.plot_tabs.setCurrentWidget(dock.memory_tab)  # where it shows
        dock.show_usage()
        assert dock.usage.text().startswith("In use now: ")
        full = format_bytes(2 * plan.context_length * plan.kv_bytes_per_token)
        assert f"2 open chats at the full context would need {full} of KV" in dock.usage.text()
        card = dock.cards["cpu"]
        assert card.numbers.text().startswith("off:") and "KV" in card.numbers.text()
        assert not card.isEnabled()
        assert dock.gpu_only.isEnabled() and not dock.hybrid.isEnabled()
        assert "CPU is off" in dock.hybrid.toolTip()
        assert dock.hybrid_summary.text().startswith(
            "Hybrid is off: it needs a CPU lane beside the GPU, and CPU is off: ")
        tab = w.chat_tabs()[0]
        tab.composer.setPlainText("hello")
        tab.send()
        qtbot.waitUntil(lambda: not tab.is_streaming, timeout=30_000)
        assert "GPU" in stats_line(tab) and "CPU" not in stats_line(tab)
    finally:
        w.close()


def test_engines_are_closed_off_the_gui_thread(qtbot, window, tiny_model_dir, monkeypatch):
    import threading

    closed_on = []
    real_close = Engine.close

    def close(self):
        closed_on.append(threading.current_thread().name)
        real_close(self)
    monkeypatch.setattr(Engine, "close", close)
    old = window.engine
    with qtbot.waitSignal(window.session.closed, timeout=60_000):
        with qtbot.waitSignal(window.engine_ready, timeout=60_000):
            window.load_model(str(tiny_model_dir))
    assert window.engine is not old and old.model_info is None  # closed and freed
    assert closed_on == ["engine-closer"]


def test_a_closed_dock_comes_back_from_the_view_menu(qtbot, window):
    assert window.menus.toggle_mode_action.isEnabled()  # a GPU lane (a stand-in): Ctrl+M works
    window.show()
    window.scheduler_dock.close()
    assert not window.scheduler_dock.isVisible()
    view = next(a.menu() for a in window.menuBar().actions() if a.text() == "&View")
    (scheduler,) = [a for a in view.actions() if a.text() == "Scheduler"]
    scheduler.trigger()
    assert window.scheduler_dock.isVisible()


def test_a_lane_card_says_when_its_lane_is_still_warming_up(qtbot, window):
    from engine.core.events import LaneSample

    card = window.scheduler.cards["gpu"]

    def sample(phase, queue=0):
        return LaneSample(lane="gpu", device="gpu", busy_fraction=0.0, tokens_per_s=0.0,
                          batch_size=0, queue_depth=queue, kv_bytes=0, prefix_cache_bytes=0,
                          phase=phase)

    window.scheduler.on_lane_sample(sample("warming up", queue=2))
    assert card.numbers.text() == "warming up: not routed to until ready · 2 queued"
    window.scheduler.on_lane_sample(sample("serving"))
    assert "busy" in card.numbers.text() and "warming" not in card.numbers.text()
    assert "drafts" not in card.numbers.text()
    # Draft work (issue 32): how many were accepted, and where the draft model ran.
    drafting = LaneSample(lane="gpu", device="gpu", busy_fraction=0.5, tokens_per_s=9.0,
                          batch_size=1, queue_depth=0, kv_bytes=0, prefix_cache_bytes=0,
                          drafted=50, accepted_drafts=42,
                          drafts_on="CPU: 4.0 ms a drafted token (against GPU 9.0)")
    window.scheduler.on_lane_sample(drafting)
    assert "drafts: 42 of 50 accepted · drafting on CPU" in card.numbers.text()
    assert "against GPU 9.0" in card.numbers.toolTip()


def test_idle_plots_are_not_redrawn(qtbot, window):
    """A minute of idle zeros is not redrawn 20 times a second (idle CPU),
    and a hidden dock draws nothing; activity draws again."""
    from engine.core.events import LaneSample

    plots = window.scheduler.plots
    window.show()
    qtbot.waitUntil(plots.isVisible)
    drawn = []
    curve = plots._curves["gpu"][0]
    real = curve.setData
    curve.setData = lambda *a, **k: drawn.append(1) or real(*a, **k)

    def sample(busy):
        return LaneSample(lane="gpu", device="gpu", busy_fraction=busy, tokens_per_s=0.0,
                          batch_size=0, queue_depth=0, kv_bytes=0, prefix_cache_bytes=0)

    for buf in (plots._util["gpu"], plots._tps["gpu"], plots._util["cpu"], plots._tps["cpu"]):
        buf[:] = 0.0  # a minute of idleness
    plots.redraw()
    drawn.clear()
    plots.push(sample(0.0))
    plots.redraw()
    assert drawn == []  # nothing changed on screen
    plots.push(sample(0.5))
    plots.redraw()
    assert drawn == [1]
    plots.push(sample(0.5))
    window.scheduler.hide()
    plots.redraw()
    assert drawn == [1]  # hidden: drawn when shown again
    window.scheduler.show()
    plots.redraw()
    assert drawn == [1, 1]


def test_the_tokens_axis_moves_in_round_steps():
    """A new range lays the whole plot out again: it changes only at 1, 2, 5 x 10^k."""
    from app.scheduler.lane_plots import nice_top

    assert [nice_top(v) for v in (0.0, 0.3, 1.0, 1.15, 2.5, 23.0, 101.0)] == \
        [1.0, 1.0, 1.0, 2.0, 5.0, 50.0, 200.0]


def _quantized_two_lanes(source, config: LaneConfig | None = None):
    return Engine(load_model(source), lanes=[LaneSpec("gpu", "cpu", acts_as="gpu"),
                                             LaneSpec("cpu", "cpu")], mode="hybrid")


def test_a_cpu_lane_card_says_what_its_quantized_layers_run(qtbot, tiny_model_dir, tmp_path):
    """Issue 51: the probe's choice on each CPU lane's card (its timings in
    the tooltip), from the plan the engine made; not on a lane of float
    weights, where nothing was chosen."""
    from mlx_lm import convert

    quantized = tmp_path / "tiny-4bit"
    convert(str(tiny_model_dir), mlx_path=str(quantized), quantize=True, q_group_size=32,
            q_bits=4)
    w = open_window(qtbot, quantized, tmp_path / "t.db", _quantized_two_lanes)
    try:
        plan, cards = w.engine.memory_plan, w.scheduler.cards
        assert plan.cpu_matmul in ("tandem", "mlx", "float32")
        for name in ("gpu", "cpu"):  # both run on the CPU here
            assert cards[name].matmul.isVisibleTo(cards[name])
            assert cards[name].matmul.text() == f"matmul: {plan.matmul(name)}"
            assert cards[name].matmul.toolTip() == plan.cpu_matmul_why
            assert any(w in plan.cpu_matmul_why for w in ("timing", "measured", "forced"))
    finally:
        w.close()


def test_float_weights_show_no_matmul_choice(qtbot, window):
    assert window.engine.memory_plan.cpu_matmul is None
    assert not any(card.matmul.isVisibleTo(card) for card in window.scheduler.cards.values())
