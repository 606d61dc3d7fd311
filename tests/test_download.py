"""Downloading a model from a Hugging Face repo id, for real through
huggingface_hub, against a local stand-in for the Hub (tests/fake_hub.py):
progress in bytes, the model loads and answers, Cancel keeps the old model."""

import pytest
from huggingface_hub import constants
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QProgressDialog, QPushButton

from tests.fake_hub import FakeHub
from tests.windows import open_window


@pytest.fixture
def window(qtbot, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # `make test` sets it
    w = open_window(qtbot, tiny_model_dir, tmp_path / "tandem.db")
    yield w
    w.close()


def test_download_shows_byte_progress_then_loads_and_answers(qtbot, window, tiny_model_dir,
                                                             tmp_path):
    old_engine = window.engine
    with FakeHub("tandem-tests/tiny", tiny_model_dir) as hub:
        seen = []
        with qtbot.waitSignal(window.engine_ready, timeout=60_000):
            window.download_model("tandem-tests/tiny", endpoint=hub.endpoint,
                                  cache_dir=str(tmp_path / "hub"))
            window.session.download_job.progress.connect(lambda done, total: seen.append((done, total)))
    assert window.engine is not old_engine
    qtbot.waitUntil(lambda: window.findChild(QProgressDialog) is None, timeout=5_000)
    assert "models--tandem-tests--tiny" in window.engine.model_info.source
    wanted = sum(len(d) for d in hub.files.values()) >> 10
    assert seen and seen[-1][0] == seen[-1][1]
    assert seen[-1][1] >= wanted - 1  # totals are in KiB, bytes of every model file
    assert any(r.startswith("GET /tandem-tests/tiny/resolve/") for r in hub.requests)
    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("hello world")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    assert tab.conversation.messages[-1]["role"] == "assistant" and tab.conversation.messages[-1]["content"]


def test_cancelling_a_download_keeps_the_previous_model(qtbot, window, tiny_model_dir, tmp_path):
    engine, label = window.engine, window.status.model_label.text()
    # Paced at 10 s per MiB: the 400 KB download takes seconds, time to cancel.
    # (huggingface_hub checks for Cancel between its 10 MB chunks; this small
    # model is one chunk, so Cancel lands while it streams and the finished
    # download must still not be loaded.)
    failures = []
    window.model_failed.connect(failures.append)
    with FakeHub("tandem-tests/slow", tiny_model_dir, seconds_per_mib=10.0) as hub:
        window.download_model("tandem-tests/slow", endpoint=hub.endpoint,
                              cache_dir=str(tmp_path / "hub"))
        progress = []
        window.session.download_job.progress.connect(lambda done, total: progress.append(done))
        qtbot.waitUntil(lambda: bool(progress), timeout=10_000)
        dialog = window.findChild(QProgressDialog)
        assert dialog is not None and dialog.isVisible()
        cancel = dialog.findChild(QPushButton)
        assert cancel.text() == "Cancel"
        qtbot.mouseClick(cancel, Qt.LeftButton)
        qtbot.waitUntil(lambda: bool(failures), timeout=30_000)
    assert failures == ["Download cancelled."]
    assert window.engine is engine and window.status.model_label.text() == label
    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("still here")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    assert tab.conversation.messages[-1]["role"] == "assistant"


def test_offline_is_said_at_once_and_plainly(qtbot, window, tmp_path):
    """No network (here: a Hub whose name cannot resolve): search and download
    say "Offline" in words, not a raw socket error after ~25 s of retries."""
    from app.models.download import HubSearch

    endpoint = "http://tandem-hub.invalid"
    search = HubSearch(window, endpoint=endpoint)
    with qtbot.waitSignal(search.failed, timeout=30_000) as said:
        search.start("llama")
    assert said.args[0].startswith("Offline:") and "Errno" not in said.args[0]
    failures = []
    window.model_failed.connect(failures.append)
    engine = window.engine
    window.download_model("tandem-tests/tiny", endpoint=endpoint,
                          cache_dir=str(tmp_path / "hub"))
    qtbot.waitUntil(lambda: bool(failures), timeout=30_000)
    assert failures[0].startswith("Offline:") and "Errno" not in failures[0]
    assert window.engine is engine  # the loaded model stays


def test_a_refused_connection_reads_as_offline_too():
    import socket

    from app.models.download import offline_reason

    try:
        socket.create_connection(("127.0.0.1", 9), timeout=2)  # nothing listens on discard
    except OSError as e:
        error = e
    assert offline_reason(RuntimeError("wrapped")) is None
    try:
        raise RuntimeError("Cannot reach") from error
    except RuntimeError as wrapped:
        assert offline_reason(wrapped).startswith("Offline:")
