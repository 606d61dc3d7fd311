"""An answer streaming when the app process is killed survives up to its last
flush, and a new window on the same database shows it."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from app.store import ChatStore
from tests.windows import open_window, paced_cpu_engine

ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from PySide6.QtWidgets import QApplication
    from app.window.main_window import MainWindow
    from app.store import ChatStore
    from engine import Engine, LaneConfig, LaneSpec
    from engine.models.loader import load_model

    app = QApplication([])
    # Steps of 50 ms pace the tiny model to human speed: the answer is mid-stream for seconds.
    factory = lambda s: Engine(load_model(s), lanes=[
        LaneSpec("cpu", "cpu", "float32", LaneConfig(min_step_s=0.05))])
    w = MainWindow({model!r}, engine_factory=factory, store=ChatStore({db!r}))
    w.show()

    def go():
        tab = w.chat_tabs()[0]
        tab.composer.setPlainText("tell me a long story about the sea")
        tab.send()
        print("SENT", tab.chat_id, flush=True)

    w.engine_ready.connect(go)
    app.exec()
""")


def test_answer_streaming_when_killed_survives_to_its_last_flush(qtbot, tiny_model_dir,
                                                                  tmp_path):
    db = tmp_path / "crash.db"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(root=str(ROOT), model=str(tiny_model_dir),
                                            db=str(db))],
        stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = child.stdout.readline()
        assert line.startswith("SENT"), f"child did not start: {line!r}"
        chat_id = int(line.split()[1])
        reader = ChatStore(db)
        # Wait until at least one flush of the streaming answer reached the disk.
        qtbot.waitUntil(lambda: len(reader.messages(chat_id)) == 2
                        and len(reader.messages(chat_id)[1].content) > 0, timeout=30_000)
        flushed = reader.messages(chat_id)[1].content
        reader.close()
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL

    store = ChatStore(db)
    user, answer = store.messages(chat_id)
    assert user.content == "tell me a long story about the sea"
    assert not answer.complete
    assert answer.content.startswith(flushed)  # nothing flushed was lost
    window = open_window(qtbot, tiny_model_dir, store)
    (tab,) = [t for t in window.chat_tabs() if t.chat_id == chat_id]
    assert tab.conversation.messages[-1]["content"] == answer.content
    assert answer.content[:20] in tab.transcript.toPlainText()
    # It reopens as interrupted, not as finished, and offers Continue / Regenerate.
    assert tab.conversation.messages[-1]["interrupted"]
    assert "interrupted" in tab.transcript.toPlainText()
    hrefs = tab.transcript.toMarkdown()
    assert tab.transcript.action_href("continue", 1) in hrefs
    assert tab.transcript.action_href("regen", 1) in hrefs
    tab.show()
    tab.grab().save(str(tmp_path / "interrupted.png"))
    # Continue: the answer goes on from where it stopped, in the same stored row.
    from PySide6.QtCore import QUrl

    tab.max_tokens.setValue(8)
    tab.transcript.anchorClicked.emit(QUrl(tab.transcript.action_href("continue", 1)))
    assert tab.is_streaming and tab.conversation.streaming_text.startswith(answer.content)
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    (user_after, answer_after) = window.store.messages(chat_id)
    assert answer_after.id == answer.id and answer_after.complete
    assert answer_after.content.startswith(answer.content)
    assert len(answer_after.content) > len(answer.content)
    assert not tab.conversation.messages[-1].get("interrupted")
    assert "interrupted" not in tab.transcript.toPlainText()
    window.close()


def test_an_answer_whose_tab_closed_mid_stream_reopens_interrupted(qtbot, tiny_model_dir,
                                                                    tmp_path):
    window = open_window(qtbot, tiny_model_dir, tmp_path / "closed.db", paced_cpu_engine(0.02))
    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("the quick brown fox jumps over the lazy dog, and then the fox")
    tab.send()
    qtbot.waitUntil(lambda: len(tab.conversation.streaming_text or "") > 0, timeout=30_000)
    chat_id = tab.chat_id
    window.close_tab(tab)
    again = window.open_chat(chat_id)
    assert again.conversation.messages[-1]["role"] == "assistant" and again.conversation.messages[-1]["interrupted"]
    assert "interrupted" in again.transcript.toPlainText()
    # Regenerate replaces it with a whole answer.
    from PySide6.QtCore import QUrl

    again.transcript.anchorClicked.emit(QUrl(again.transcript.action_href("regen", 1)))
    qtbot.waitUntil(lambda: not again.is_streaming, timeout=60_000)
    stored = window.store.messages(chat_id)
    assert [m.role for m in stored] == ["user", "assistant"] and stored[1].complete
    window.close()
