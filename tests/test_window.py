"""The first window under offscreen Qt, driven by qtbot, on the real engine."""

import threading
from pathlib import Path

from PySide6.QtCore import QCoreApplication, Qt

from app.store import ChatStore
from tests.waiting import wait_until
from tests.windows import open_window as _open_window, stats_line



def test_type_send_and_stream(qtbot, window):
    tab = window.chat_tabs()[0]
    qtbot.keyClicks(tab.composer, "hello world, how are you today?")
    qtbot.keyClick(tab.composer, Qt.Key_Return)
    assert tab.is_streaming
    qtbot.waitUntil(lambda: bool(tab.conversation.streaming_text), timeout=30_000)
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    assert tab.conversation.messages[-1]["role"] == "assistant" and tab.conversation.messages[-1]["content"]
    stats = stats_line(tab)
    assert "tokens" in stats and "CPU" in stats
    # Said once, under the answer: not again under the composer.
    assert tab.footer.text() == "" and tab.transcript.toPlainText().count(stats) == 1
    assert window.status.model_label.text() != "No model"


def test_stop_stops_streaming(qtbot, window):
    engine = window.engine
    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("the quick brown fox jumps over the lazy dog, and then the fox")
    qtbot.mouseClick(tab.send_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: len(tab.conversation.streaming_text or "") > 0, timeout=30_000)
    qtbot.mouseClick(tab.stop_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=30_000)
    assert "stopped" in stats_line(tab)
    assert tab.send_button.isEnabled()
    assert all(lane.is_idle for lane in engine.lanes.values())


def test_a_new_chat_takes_the_keyboard_and_knows_its_context(qtbot, window):
    from PySide6.QtWidgets import QApplication

    window.show()
    qtbot.waitExposed(window)
    window.activateWindow()
    first = window.chat_tabs()[0]
    assert first.context_meter.text() == f"context: 0 / {window.engine.context_length} tokens"
    window.menus.new_action.trigger()
    tab = window.current_tab()
    assert tab is not first
    qtbot.waitUntil(lambda: QApplication.focusWidget() is tab.composer, timeout=2_000)
    qtbot.keyClicks(QApplication.focusWidget(), "typed at once")
    assert tab.composer.toPlainText() == "typed at once"
    assert tab.context_meter.maximum() == window.engine.context_length
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    used = tab.context_meter.value()
    assert used > 0
    # A reopened chat knows how much of the context it uses before the next turn.
    window.close_tab(tab)
    again = window.open_chat(tab.chat_id)
    assert again.context_meter.value() == used


def test_a_machine_without_openblas_is_told_what_to_install(qtbot, tiny_model_dir, tmp_path,
                                                            monkeypatch):
    import app.window.status_bar as status_bar
    from engine.runtime.blas import ADVICE

    monkeypatch.setattr(status_bar, "openblas_advice", lambda: ADVICE)
    w = _open_window(qtbot, tiny_model_dir, tmp_path / "b.db")
    assert "libopenblas0-pthread" in w.status.blas_label.toolTip() and w.status.blas_label.text()
    assert w.statusBar().currentMessage() == ADVICE
    w.close()
    monkeypatch.setattr(status_bar, "openblas_advice", lambda: None)
    quiet = _open_window(qtbot, tiny_model_dir, tmp_path / "c.db")
    assert quiet.status.blas_label.text() == "" and ADVICE not in quiet.statusBar().currentMessage()
    quiet.close()


def test_the_prompt_is_tokenised_off_the_gui_thread(qtbot, window):
    """Rendering a conversation (as a 1 MB paste would take a while) runs on a
    worker: while it is held there, send has returned and the window keeps
    handling events. Paced by events, not by the clock."""
    from PySide6.QtCore import QTimer

    engine, seen = window.engine, []
    real = engine.render
    release, rendered = threading.Event(), threading.Event()

    def held_render(messages, *tools):
        seen.append(threading.current_thread() is threading.main_thread())
        release.wait(30)
        try:
            return real(messages, *tools)
        finally:
            rendered.set()
    engine.render = held_render
    ticks = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(1))
    timer.start(10)
    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("hello world")
    tab.send()  # returns while the render is held on its worker
    qtbot.waitUntil(lambda: len(ticks) >= 10, timeout=10_000)  # the window kept ticking
    assert seen == [False] and not rendered.is_set()
    release.set()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    timer.stop()
    assert tab.conversation.messages[-1]["role"] == "assistant"
    # Stop while it is still being tokenised: nothing starts, the text comes back.
    release.clear()
    rendered.clear()
    tab.composer.setPlainText("stop me early")
    tab.send()
    window.stop(tab)
    assert not tab.is_streaming and tab.composer.toPlainText() == "stop me early"
    release.set()
    # The tokeniser finishes (its thread posts its result and ends)...
    assert wait_until(lambda: rendered.is_set() and not any(
        t.name == "tokenise" for t in threading.enumerate()), 10)
    QCoreApplication.processEvents()  # ...and its result, queued to the GUI thread, arrives
    assert not tab.is_streaming and window.engine.lanes["cpu"].is_idle
    assert [m["role"] for m in tab.conversation.messages] == ["user", "assistant"]


def test_quit_closes_the_window(qtbot, window):
    from PySide6.QtGui import QKeySequence

    assert window.menus.quit_action.shortcut() == QKeySequence(QKeySequence.Quit) or \
        window.menus.quit_action.shortcut() == QKeySequence("Ctrl+Q")
    assert not window.menus.quit_action.shortcut().isEmpty()
    window.show()
    window.menus.quit_action.trigger()
    assert not window.isVisible()


def test_three_tabs_stream_at_once_and_are_stored(qtbot, window):
    texts = ["hello world, how are you today?", "numbers 0123456789 and emoji", "café"]
    tabs = [window.chat_tabs()[0], window.new_chat(), window.new_chat()]
    for tab, text in zip(tabs, texts):
        tab.composer.setPlainText(text)
        tab.send()
    assert all(t.is_streaming for t in tabs)
    qtbot.waitUntil(lambda: not any(t.is_streaming for t in tabs), timeout=60_000)
    for tab, text in zip(tabs, texts):
        stored = window.store.messages(tab.chat_id)
        assert [m.role for m in stored] == ["user", "assistant"]
        assert stored[0].content == text
        assert stored[1].complete and stored[1].content == tab.conversation.messages[-1]["content"]
        assert stored[1].stats["output_tokens"] > 0
    titles = {c.title for c in window.store.chats()}
    assert set(texts) <= titles


def test_new_window_restores_chats_and_tabs(qtbot, tiny_model_dir, db):
    first = _open_window(qtbot, tiny_model_dir, db)
    tab = first.chat_tabs()[0]
    tab.composer.setPlainText("hello world")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    second_tab = first.new_chat()
    answer = tab.conversation.messages[-1]["content"]
    first.close()
    again = _open_window(qtbot, tiny_model_dir, db)
    restored = again.chat_tabs()
    assert [t.chat_id for t in restored] == [tab.chat_id, second_tab.chat_id]
    assert again.tabs.currentWidget().chat_id == second_tab.chat_id
    assert restored[0].prompt_messages() == [{"role": "user", "content": "hello world"},
                                          {"role": "assistant", "content": answer}]
    assert "hello world" in restored[0].transcript.toPlainText()
    again.close()


def test_streaming_answer_is_flushed_while_it_streams(qtbot, slow_window):
    window = slow_window
    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("the quick brown fox jumps over the lazy dog, and then the fox")
    tab.send()
    qtbot.waitUntil(lambda: len(tab.conversation.streaming_text or "") > 5, timeout=30_000)
    # A second connection sees the partial answer within about a second, as a
    # restarted app would after a crash.
    reader = ChatStore(window.store.path)
    qtbot.waitUntil(lambda: len(reader.messages(tab.chat_id)[-1].content) > 0, timeout=5_000)
    partial = reader.messages(tab.chat_id)[-1]
    assert not partial.complete
    assert (tab.conversation.streaming_text or tab.conversation.messages[-1]["content"]).startswith(partial.content)
    reader.close()
    window.stop(tab)
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=30_000)


def test_closing_a_streaming_tab_keeps_the_others_working(qtbot, slow_window):
    window = slow_window
    a, b = window.chat_tabs()[0], window.new_chat()
    a.composer.setPlainText("the quick brown fox jumps over the lazy dog, and then the fox")
    b.composer.setPlainText("hello world, how are you today?")
    a.send()
    b.send()
    qtbot.waitUntil(lambda: len(a.conversation.streaming_text or "") > 0, timeout=30_000)
    chat_a = a.chat_id
    window.close_tab(a)
    assert all(t.chat_id != chat_a for t in window.chat_tabs())
    qtbot.waitUntil(lambda: not b.is_streaming, timeout=60_000)
    assert b.conversation.messages[-1]["role"] == "assistant"
    assert window.store.messages(chat_a)[0].content.startswith("the quick")


def test_shortcuts_and_export(qtbot, window, tmp_path, monkeypatch):
    from PySide6.QtGui import QKeySequence

    import app.chat.chat_files as chat_files

    assert window.menus.new_action.shortcut() == QKeySequence(QKeySequence.New)
    assert window.menus.toggle_mode_action.shortcut() == QKeySequence("Ctrl+M")
    count = len(window.chat_tabs())
    window.menus.new_action.trigger()
    assert len(window.chat_tabs()) == count + 1
    window.menus.previous_action.trigger()
    assert window.tabs.currentIndex() == count - 1
    window.menus.next_action.trigger()
    assert window.tabs.currentIndex() == count
    window.menus.close_action.trigger()
    assert len(window.chat_tabs()) == count
    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("Show code")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    # Export… offers the Documents folder (or home), not the app's working directory.
    offered = []
    monkeypatch.setattr(chat_files.QFileDialog, "getSaveFileName", staticmethod(
        lambda parent, title, where, kinds: offered.append(where) or (str(tmp_path / "x.md"), "")))
    window.menus.export_action.trigger()
    assert Path(offered[0]).is_absolute() and Path(offered[0]).parent != Path.cwd()
    assert Path(offered[0]).name.endswith(".md") and (tmp_path / "x.md").exists()
    path = window.export_chat(tab, tmp_path / "chat.md")
    text = path.read_text()
    assert text.startswith("# Show code") and "## You\n\nShow code" in text
    assert tab.conversation.messages[-1]["content"].strip()[:10] in text


def test_window_layout_is_saved_and_restored(qtbot, tiny_model_dir, db):
    first = _open_window(qtbot, tiny_model_dir, db)
    first.resize(700, 500)  # within the offscreen screen, which restoring clamps to
    splitter = first.scheduler.splitter
    default = splitter.sizes()
    splitter.setSizes([default[0] + 120, default[1] - 120])  # the user drags the dock's splitter
    dragged = splitter.sizes()
    assert abs(dragged[0] - default[0]) > 60, (default, dragged)
    first.close()
    again = _open_window(qtbot, tiny_model_dir, db)
    assert (again.width(), again.height()) == (700, 500)
    assert again.store.setting("window.state")
    restored = again.scheduler.splitter.sizes()
    assert all(abs(a - b) <= 2 for a, b in zip(restored, dragged)), (restored, dragged)
    again.close()


def test_a_search_with_no_hits_says_so_and_regenerate_clears_the_old_stats(qtbot, window):
    sidebar = window.sidebar
    sidebar.search.setText("no chat is called this")
    assert sidebar.list.count() == 1
    line = sidebar.list.item(0)
    assert "No chats match" in line.text() and line.data(Qt.UserRole) is None
    opened = []
    sidebar.open_requested.connect(opened.append)
    sidebar.list.itemClicked.emit(line)
    assert not opened  # the line opens nothing
    sidebar.search.setText("")
    assert all(sidebar.list.item(i).data(Qt.UserRole) is not None
               for i in range(sidebar.list.count()))
    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("hello world, how are you today?")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    first = stats_line(tab)
    assert "tokens" in first
    tab.regenerate_button.click()
    assert first not in tab.transcript.toPlainText()  # the old answer's stats went with it
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    assert "tokens" in stats_line(tab)


def test_a_long_stats_line_never_widens_the_window(qtbot, window):
    """The footer beside the buttons wraps: after an answer (and with a long
    message there) the window's minimum width stays what it was."""
    window.show()
    tab = window.chat_tabs()[0]
    before = window.minimumSizeHint().width()
    tab.composer.setPlainText("hello world")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    assert stats_line(tab)
    tab.footer.setText("prefill GPU · decode CPU · " * 20 + "stopped: length")
    from PySide6.QtWidgets import QApplication

    QApplication.processEvents()  # the layout takes the new text in
    tab.layout().invalidate()
    window.layout().activate()
    assert tab.minimumSizeHint().width() < 800
    assert window.minimumSizeHint().width() <= max(before, 1200)
    # Nor do the chat's settings when shown (one row of them needed 856 px).
    tab.settings_toggle.click()
    QApplication.processEvents()
    assert not tab.settings_row.isHidden() and tab.minimumSizeHint().width() < 600


def test_quit_asks_while_an_answer_streams_and_cancel_keeps_it(qtbot, slow_window,
                                                               monkeypatch):
    from app.window import saving_status

    window = slow_window
    window.show()
    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("the quick brown fox jumps over the lazy dog, and then the fox")
    tab.send()
    qtbot.waitUntil(lambda: bool(tab.conversation.streaming_text), timeout=30_000)  # tokens arrive
    asked = []
    monkeypatch.setattr(saving_status, "ask", lambda parent, title, text, buttons:
                        asked.append(text) or saving_status.CANCEL)
    window.menus.quit_action.trigger()
    assert asked and "1 answer is still being written" in asked[0]
    assert window.isVisible() and tab.is_streaming  # Cancel: nothing stopped
    window.close()  # a close from code (an app shutting down, a test) does not ask
    assert len(asked) == 1 and not window.isVisible()


def test_a_badge_when_a_background_tab_finishes_and_ctrl_k_searches(qtbot, window):
    first, second = window.chat_tabs()[0], window.new_chat()
    assert window.tabs.currentWidget() is second
    first.composer.setPlainText("hello world")
    first.send()
    second.composer.setPlainText("café")
    second.send()
    qtbot.waitUntil(lambda: not first.is_streaming and not second.is_streaming, timeout=60_000)
    index = window.tabs.indexOf(first)
    assert first.unread and not window.tabs.tabIcon(index).isNull()
    assert not getattr(second, "unread", False)  # finished in front: no badge
    assert window.tabs.tabIcon(window.tabs.indexOf(second)).isNull()
    window.tabs.setCurrentWidget(first)  # seen: the badge goes
    assert not first.unread and window.tabs.tabIcon(index).isNull()
    window.show()
    window.chats_dock.hide()
    window.menus.search_action.trigger()  # Ctrl+K
    assert window.chats_dock.isVisible()
    # The field the window gives the keyboard to (whether or not the window is
    # active: offscreen, another test's window may be).
    assert window.focusWidget() is window.sidebar.search
