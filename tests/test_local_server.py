"""The app's Local server under offscreen Qt: a request from the `openai`
client joins the window's engine next to a chat tab, shows up in the routing
timeline and the decision log labelled as an API request, and in no tab."""

import threading

import httpx
import openai

from tests.test_server import _free_port
from tests.windows import open_window, paced_cpu_engine


def test_api_requests_show_in_the_dock_not_in_tabs(qtbot, tiny_model_dir, tmp_path):
    window = open_window(qtbot, tiny_model_dir, tmp_path / "srv.db", paced_cpu_engine(0.01))
    window.server.port = _free_port()
    window.server_action.setChecked(True)
    window.toggle_server()
    assert window.server.running and str(window.server.port) in window.server_label.text()
    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("the quick brown fox jumps over the lazy dog")
    tab.send()
    answers = []

    def ask():
        with openai.OpenAI(base_url=f"http://127.0.0.1:{window.server.port}/v1",
                           api_key="x", max_retries=0) as client:
            done = client.chat.completions.create(
                model=window.engine.model_info.name, user="editor-plugin", max_tokens=12,
                messages=[{"role": "user", "content": "hello world, how are you today?"}])
        answers.append(done.choices[0].message.content)

    asker = threading.Thread(target=ask)
    asker.start()
    qtbot.waitUntil(lambda: not tab.is_streaming and bool(answers), timeout=60_000)
    asker.join(10)
    timeline = window.scheduler.timeline
    qtbot.waitUntil(lambda: any(t.label == "API editor-plugin"
                                for t in timeline.tracks.values()), timeout=5_000)
    log = window.scheduler.log
    tabs_logged = {log.item(r, 1).text() for r in range(log.rowCount())}
    assert "API editor-plugin" in tabs_logged and tab.title in tabs_logged
    assert [m["role"] for m in tab.messages] == ["user", "assistant"]  # nothing else here
    assert answers[0] and answers[0] not in [m["content"] for m in tab.messages]
    window.server_action.setChecked(False)
    window.toggle_server()
    assert not window.server.running and window.server_label.text() == ""
    try:
        httpx.get(f"http://127.0.0.1:{window.server.port}/health", timeout=2)
        reachable = True
    except httpx.HTTPError:
        reachable = False
    assert not reachable  # turned off: nothing listens
    window.close()


def test_the_server_is_off_until_asked_and_says_when_the_port_is_taken(qtbot, tiny_model_dir,
                                                                        tmp_path):
    import socket

    window = open_window(qtbot, tiny_model_dir, tmp_path / "srv2.db")
    assert not window.server.running and not window.server_action.isChecked()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        window.server.port = taken.getsockname()[1]
        window.server_action.setChecked(True)
        window.toggle_server()
        assert not window.server.running and not window.server_action.isChecked()
        assert "in use" in window.statusBar().currentMessage()
    window.close()
