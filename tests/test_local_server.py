"""The app's Local server under offscreen Qt: a request from the `openai`
client joins the window's engine next to a chat tab, shows up in the routing
timeline and the decision log labelled as an API request, and in no tab; its
settings (port, an API key kept in the OS keyring, start with Tandem)."""

import sys
import threading

import httpx
import keyring
import openai
import pytest
from keyring.backends import fail

from app.connections import keys

from tests.keyrings import MemoryKeyring
from tests.test_server import _free_port
from tests.windows import open_window, paced_cpu_engine


def test_api_requests_show_in_the_dock_not_in_tabs(qtbot, tiny_model_dir, tmp_path):
    window = open_window(qtbot, tiny_model_dir, tmp_path / "srv.db", paced_cpu_engine(0.01))
    window.server.port = _free_port()
    window.menus.server_action.setChecked(True)
    window.toggle_server()
    assert window.server.running and str(window.server.port) in window.status.server_label.text()
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
    with openai.OpenAI(base_url=f"http://127.0.0.1:{window.server.port}/v1", api_key="x",
                       max_retries=0) as client:  # another endpoint: named in the label
        client.responses.create(model=window.engine.model_info.name, user="codex",
                                input="hello", max_output_tokens=4)
    qtbot.waitUntil(lambda: any(t.label == "API codex · /v1/responses"
                                for t in timeline.tracks.values()), timeout=5_000)
    log = window.scheduler.log
    tabs_logged = {log.item(r, 1).text() for r in range(log.rowCount())}
    assert "API editor-plugin" in tabs_logged and tab.title in tabs_logged
    assert [m["role"] for m in tab.conversation.messages] == ["user", "assistant"]  # nothing else here
    assert answers[0] and answers[0] not in [m["content"] for m in tab.conversation.messages]
    window.menus.server_action.setChecked(False)
    window.toggle_server()
    assert not window.server.running and window.status.server_label.text() == ""
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
    assert not window.server.running and not window.menus.server_action.isChecked()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        window.server.port = taken.getsockname()[1]
        window.menus.server_action.setChecked(True)
        window.toggle_server()
        assert not window.server.running and not window.menus.server_action.isChecked()
        assert "in use" in window.statusBar().currentMessage()
    window.close()


def _keyring_fixture(backend):
    previous = keyring.get_keyring()
    keyring.set_keyring(backend)
    keys._session.clear()
    yield backend
    keyring.set_keyring(previous)
    keys._session.clear()


@pytest.fixture
def memory_keyring():
    yield from _keyring_fixture(MemoryKeyring())


@pytest.fixture
def no_keyring():
    """A headless Linux (and CI): keyring's backend that fails every call."""
    yield from _keyring_fixture(fail.Keyring())


def _status(url, key=None):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.get(f"{url}/models", headers=headers, timeout=10).status_code


def _image_url(url, key, image_url) -> str:
    """The error a chat request with an image URL gets."""
    answer = httpx.post(f"{url}/chat/completions", timeout=30,
                        headers={"Authorization": f"Bearer {key}"},
                        json={"messages": [{"role": "user", "content": [
                            {"type": "image_url", "image_url": {"url": image_url}}]}]})
    assert answer.status_code == 400
    return answer.json()["error"]["message"]


def _fetcher(local_server):
    """The image-URL fetcher the running server's requests are parsed with."""
    return local_server._server.config.app.state.config.image_urls.fetcher


def test_server_settings_port_key_in_the_keyring_and_start_with_tandem(
        qtbot, tiny_model_dir, tmp_path, memory_keyring):
    from app.connections.server_settings import open_server_settings

    db = tmp_path / "settings.db"
    window = open_window(qtbot, tiny_model_dir, db)
    dialog = open_server_settings(window)
    port = _free_port()
    dialog.port.setValue(port)
    assert dialog.url.text() == f"http://127.0.0.1:{port}/v1"
    assert dialog.key.text() == ""
    dialog.require_key.setChecked(True)  # a key is made at once
    key = dialog.key.text()
    assert key.startswith("tandem-") and len(key) > 30
    assert "keyring" in dialog.where.text() and "session only" not in dialog.where.text()
    dialog.start_with.setChecked(True)
    assert not dialog.image_urls.isChecked()
    dialog.image_urls.setChecked(True)
    dialog.accept()
    assert memory_keyring.saved == {("Tandem", "local-server-api-key"): key}
    assert window.store.setting("local_server") == {
        "port": port, "require_key": True, "start_with_tandem": True, "embedding_model": "",
        "image_urls": True}
    assert not window.server.running  # settings alone start nothing
    window.toggle_server(True)
    url = window.server.url
    assert window.server.running and "key required" in window.status.server_label.text()
    assert _status(url) == 401 and _status(url, "wrong") == 401 and _status(url, key) == 200
    # Image URLs are fetched now (never from this computer: test_image_urls). A text
    # model refuses a request's images before any is fetched (issue 47), so the
    # switch shows in the server's own config.
    assert "cannot read images" in _image_url(url, key, "http://127.0.0.1:1/a.png")
    assert _fetcher(window.server) is not None
    window.close()
    files = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert key.encode() not in files  # never in the database (or its journal)
    again = open_window(qtbot, tiny_model_dir, db)  # starts with Tandem, same port and key
    qtbot.waitUntil(lambda: again.server.running, timeout=10_000)
    assert again.menus.server_action.isChecked() and again.server.port == port
    assert _status(url, key) == 200 and _status(url) == 401
    again.server.settings.image_urls = False  # and off
    again.toggle_server(True)
    assert _fetcher(again.server) is None
    again.close()


def test_without_a_keyring_the_key_lasts_the_session_and_the_user_is_told(
        qtbot, tiny_model_dir, tmp_path, no_keyring):
    from app.connections.server_settings import open_server_settings

    db = tmp_path / "nokeyring.db"
    window = open_window(qtbot, tiny_model_dir, db)
    dialog = open_server_settings(window)
    assert "session only" in dialog.where.text()
    dialog.port.setValue(_free_port())
    dialog.require_key.setChecked(True)
    dialog.start_with.setChecked(True)
    key = dialog.key.text()
    dialog.accept()
    assert "session only" in window.statusBar().currentMessage()
    window.toggle_server(True)
    assert _status(window.server.url, key) == 200
    window.close()
    keys._session.clear()  # a restart: the key is gone
    again = open_window(qtbot, tiny_model_dir, db)
    assert not again.server.running and not again.menus.server_action.isChecked()
    assert "needs an API key" in again.statusBar().currentMessage()
    again.close()


def test_on_macos_keys_go_to_the_keychain_through_keyrings_macos_backend(no_keyring,
                                                                         monkeypatch):
    """Issue 34: on macOS, where keyring's discovery found no backend (a
    bundle), keys still go to the Keychain through keyring's macOS backend
    (a stand-in here); where that cannot be used, the session fallback."""
    from keyring.backends import macOS

    class Keychain(MemoryKeyring, macOS.Keyring):  # keyring's macOS backend, in memory
        priority = 5

    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(macOS, "Keyring", Keychain)
    assert keys.put("test-key", "s3cret") is True
    chain = keyring.get_keyring()
    assert isinstance(chain, Keychain) and chain.saved == {(keys.SERVICE, "test-key"): "s3cret"}
    assert keys.backend_name() == "macOS Keychain" and "macOS Keychain" in keys.where("")
    keys.forget("test-key")
    assert chain.saved == {}

    class Locked(Keychain):
        @property
        def priority(self):
            raise RuntimeError("macOS required")

    keyring.set_keyring(fail.Keyring())
    monkeypatch.setattr(macOS, "Keyring", Locked)
    assert keys.put("test-key", "s3cret") is False  # this session only, as on a headless Linux
    assert keys.get("test-key") == "s3cret" and not keys.persistent()
