"""The routing timeline on a controllable clock: rows per chat, a real time
axis with zoom, pan and follow-now, hover and click on a request."""

import pytest
from PySide6.QtCore import QPoint, Qt

from app.scheduler.timeline import Timeline
from app.scheduler.timeline_view import TimelinePanel, TimelineView, tick_step


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def view(qtbot):
    timeline = Timeline()
    # Chat 1: two requests, one after the other; chat 2: one, moved to the CPU.
    timeline.routed("r1", "Paris", "prefill", "gpu", 940.0, "cold prompt: GPU", row="1")
    timeline.routed("r1", "Paris", "decode", "gpu", 941.0, "decode stays", row="1")
    timeline.finished("r1", "stop", 950.0)
    timeline.routed("r2", "Paris, again", "prefill", "cpu", 951.0, "warm: CPU", row="1")
    timeline.routed("r2", "Paris, again", "decode", "cpu", 951.5, row="1")
    timeline.routed("r3", "Rust", "prefill", "gpu", 960.0, row="2")
    timeline.routed("r3", "Rust", "decode", "gpu", 962.0, row="2")
    timeline.migrated("r3", "cpu", 980.0, "CPU finishes the rest sooner")
    return _shown(qtbot, timeline, {"gpu": "gpu", "cpu": "cpu"})


def _shown(qtbot, timeline, lane_kinds):
    """`timeline` drawn in a panel on screen, its clock at 1000."""
    v = TimelineView(timeline, lane_kinds)
    v.now = Clock()
    panel = TimelinePanel(v)
    qtbot.addWidget(panel)
    panel.resize(600, 200)
    panel.show()
    qtbot.waitExposed(panel)
    v.panel = panel  # kept alive with the view
    return v


def _row_y(view, row):
    return view.AXIS + row * view.ROW + view.ROW // 2


def test_rows_are_chats_and_each_request_is_its_own_bar(view):
    rows = view.timeline.row_tracks()
    assert [label for label, _ in rows] == ["Paris, again", "Rust"]  # the chat's latest title
    assert [len(tracks) for _, tracks in rows] == [2, 1]
    # The window is the last 60 s, ending now (1000): 940 is the left edge.
    assert view.x_of(940.0) == view.LABEL and view.t_of(view.x_of(975.0)) == pytest.approx(975.0)
    y = _row_y(view, 0)
    first, seg = view.hit(view.x_of(945.0), y)
    assert first.request_id == "r1" and seg.phase == "decode"
    assert view.hit(view.x_of(952.0), y)[0].request_id == "r2"
    assert view.hit(view.x_of(990.0), _row_y(view, 1))[1].lane == "cpu"  # after the move
    assert view.hit(view.x_of(945.0), _row_y(view, 2)) is None  # no third row
    assert view.hit(5, y)[0].request_id == "r2"  # a row's label: its latest request
    # Hover says what the bar is and why it is there.
    text = view.describe(*view.hit(view.x_of(940.5), y))
    assert "prefill on GPU" in text and "cold prompt: GPU" in text and "finished (stop)" in text
    # Drawn in the lanes' colours: a pale prefill, a solid decode.
    image = view.grab().toImage()
    colours = {image.pixelColor(x, y).name() for x in range(view.LABEL, image.width())}
    assert view.color("gpu", "decode").name() in colours
    assert view.color("cpu", "prefill").name() in colours


def test_zoom_pan_and_follow_now(qtbot, view):
    panel = view.panel
    assert panel.span.text() == "last 60 s" and panel.follow.isChecked()
    qtbot.mouseClick(panel.zoom_in, Qt.LeftButton)
    assert view.span_s == pytest.approx(48.0) and view.window() == (952.0, 1000.0)
    view.now.t = 1010.0  # following: the window moves with the clock
    assert view.window()[1] == 1010.0
    # Dragging looks back: following stops, the time under the pointer stays put.
    x = view.x_of(990.0)
    qtbot.mousePress(view, Qt.LeftButton, pos=QPoint(int(view.LABEL + 1), 3))
    assert not view.follow and not panel.follow.isChecked()
    qtbot.mouseMove(view, QPoint(int(view.LABEL + 101), 3))
    qtbot.mouseRelease(view, Qt.LeftButton, pos=QPoint(int(view.LABEL + 101), 3))
    assert view.window()[1] == pytest.approx(1010.0 - 100 / view._scale())
    view.now.t = 1100.0
    assert view.window()[1] < 1010.0  # paused: the clock does not move it
    before = view.t_of(x)
    view.zoom(2.0, x)  # zoom out around the pointer
    assert view.span_s == pytest.approx(96.0) and view.t_of(x) == pytest.approx(before)
    qtbot.mouseDClick(view, Qt.LeftButton, pos=QPoint(int(view.LABEL + 50), 3))
    assert view.follow and panel.follow.isChecked() and view.window()[1] == 1100.0
    assert panel.span.text() == "last 96 s"
    for _ in range(40):
        view.zoom(0.5)
    assert view.span_s >= 5  # bounded either way


def test_click_selects_the_request(qtbot, view):
    with qtbot.waitSignal(view.request_selected) as blocker:
        qtbot.mouseClick(view, Qt.LeftButton, pos=QPoint(int(view.x_of(970.0)), _row_y(view, 1)))
    assert blocker.args == ["r3"]


def test_ticks_are_round_and_readable():
    assert tick_step(60, 480) == 10  # 80 px apart
    assert tick_step(3600, 480) == 600
    assert tick_step(10, 480) == 2


def test_hover_shows_a_tooltip(qtbot, view, monkeypatch):
    from PySide6.QtWidgets import QToolTip

    shown = []
    monkeypatch.setattr(QToolTip, "showText", lambda pos, text, *a: shown.append(text))
    qtbot.mouseMove(view, QPoint(int(view.x_of(990.0)), _row_y(view, 1)))
    assert shown and "CPU finishes the rest sooner" in shown[-1]


def test_a_request_whose_drafts_paid_says_so_and_is_banded(qtbot):
    """Draft work (issue 32): the hover says how many drafts were accepted,
    and its decode bar has a pale band along its top; one without has none."""
    timeline = Timeline()
    timeline.routed("d", "Copy", "prefill", "gpu", 950.0, row="1")
    timeline.routed("d", "Copy", "decode", "gpu", 951.0, row="1")
    timeline.finished("d", "stop", 990.0, drafted=50, accepted=42)
    timeline.routed("p", "Chat", "prefill", "gpu", 950.0, row="2")
    timeline.routed("p", "Chat", "decode", "gpu", 951.0, row="2")
    timeline.finished("p", "stop", 990.0)
    v = _shown(qtbot, timeline, {"gpu": "gpu"})
    assert "drafts: 42 of 50 accepted" in v.describe(*v.hit(v.x_of(970.0), _row_y(v, 0)))
    assert "drafts" not in v.describe(*v.hit(v.x_of(970.0), _row_y(v, 1)))
    image = v.grab().toImage()
    band = v.color("gpu", "decode").lighter(160).name()
    x = int(v.x_of(970.0))
    tops = [v.AXIS + row * v.ROW + 4 for row in (0, 1)]
    assert image.pixelColor(x, tops[0]).name() == band
    assert image.pixelColor(x, tops[1]).name() != band


def test_kv_read_back_from_disk_is_its_own_bar_before_the_prefill(qtbot):
    """Issue 33: a request whose prefix was restored from disk starts with a
    restore bar, drawn in the disk's colour for the seconds reading took,
    and its hover says how many tokens came back; one without has none."""
    timeline = Timeline()
    timeline.routed("w", "Resumed", "prefill", "cpu", 960.0, "warm: CPU", row="1",
                    restored=(3072, 20.0))
    timeline.routed("w", "Resumed", "decode", "cpu", 961.0, row="1")
    timeline.routed("c", "Cold", "prefill", "cpu", 960.0, row="2")
    v = _shown(qtbot, timeline, {"cpu": "cpu"})
    track, seg = v.hit(v.x_of(950.0), _row_y(v, 0))
    assert seg.phase == "restore" and (seg.start, seg.end) == (940.0, 960.0)
    assert "restored 3,072 tokens from disk in 20.00 s" in v.describe(track, seg)
    assert "read from disk, 20.0 s" in v.describe(track, seg)
    assert [s.phase for s in track.segments] == ["restore", "prefill", "decode"]
    assert v.hit(v.x_of(950.0), _row_y(v, 1)) is None  # the cold one starts at 960
    image = v.grab().toImage()
    assert image.pixelColor(int(v.x_of(950.0)), _row_y(v, 0)).name() == \
        v.color("disk", "restore").name()


def test_a_prefill_of_images_and_a_tool_wait_say_what_they_are(qtbot):
    """Issue 37: "prefill (2 images)"; issue 36: a chat waiting on a tool."""
    timeline = Timeline()
    timeline.routed("r1", "Photo", "prefill", "gpu", 990.0, "cold prompt: GPU", row="1",
                    images=2)
    timeline.routed("r1", "Photo", "decode", "gpu", 992.0, row="1")
    timeline.finished("r1", "stop", 994.0)
    timeline.tool_wait("1", "Photo", "get_weather", 994.0, 996.0,
                       "tool get_weather (weather): asked 1.5 s, ran 0.50 s")
    view = _shown(qtbot, timeline, {"gpu": "gpu"})
    track, seg = view.hit(view.x_of(991.0), _row_y(view, 0))
    assert "prefill (2 images) on GPU" in view.describe(track, seg)
    tool, seg = view.hit(view.x_of(995.0), _row_y(view, 0))
    shown = view.describe(tool, seg)
    assert "waiting on a tool" in shown and "asked 1.5 s, ran 0.50 s" in shown
    assert view.color("tool", "tool").name() == "#95a5a6"
