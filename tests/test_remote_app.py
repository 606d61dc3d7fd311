"""Engine > Remote lanes… in the real window: a second `tandem serve` (the
same tiny model) is added as a remote lane; the dock shows it like a local
lane, the key goes to the keyring (an in-memory stand-in), never the
database; the saved list is given to the next engine."""

from __future__ import annotations

import json
import sqlite3

from app.connections import keys
from app.connections.remote_lanes import SETTING, RemoteLanesDialog, key_name, load_saved
from tests.test_local_server import memory_keyring  # noqa: F401 (a fixture)
from tests.test_remote_lanes import serving
from tests.windows import open_window


def test_adding_a_remote_lane_in_the_window(qtbot, tiny_model_dir, db, memory_keyring):  # noqa: F811
    window = open_window(qtbot, tiny_model_dir, db)
    try:
        with serving(tiny_model_dir) as url:
            dialog = window.open_remote_lanes()
            dialog.url.setText(f"{url}/v1")
            dialog.key.setText("remote-s3cret")
            dialog.accept()
            engine = window.engine
            assert "remote" in engine.remotes.lanes
            qtbot.waitUntil(lambda: engine.remotes.lanes["remote"].ready.is_set(),
                            timeout=60_000)
            assert engine.mode == "hybrid"
            dock = window.scheduler
            assert "remote" in dock.cards and dock.hybrid.isEnabled()
            assert dock.gpu_only.text() == "Local only"
            qtbot.waitUntil(lambda: "in flight" in dock.cards["remote"].numbers.text(),
                            timeout=10_000)
            assert window.status.mode_label.text() == "Hybrid: CPU + remote"
            # Ctrl+M toggles local only / hybrid.
            window.toggle_mode()
            assert engine.mode == "cpu-only" and dock.gpu_only.isChecked()
            window.toggle_mode()
            assert engine.mode == "hybrid"
        # The list is saved, the key is not (it is in the keyring).
        saved = load_saved(window.store)
        assert [(r.name, r.url) for r in saved] == [("remote", f"{url}/v1")]
        assert keys.get(key_name("remote")) == "remote-s3cret"
    finally:
        window.close()
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT key, value FROM settings").fetchall()
    assert any(k == SETTING for k, _ in rows)
    assert "remote-s3cret" not in json.dumps(rows)


def test_plain_http_to_another_machine_asks_first(qtbot, tiny_model_dir, db):
    window = open_window(qtbot, tiny_model_dir, db)
    try:
        dialog = RemoteLanesDialog(window)
        dialog.url.setText("http://192.0.2.7:8000/v1")
        assert dialog.plain_http.isVisibleTo(dialog)
        assert not dialog._add()
        assert "https" in dialog.error.text()
        dialog.plain_http.setChecked(True)
        assert dialog._add()
        assert dialog.remotes[0].allow_http
        dialog.url.setText("https://gpu.example/v1")
        assert not dialog.plain_http.isVisibleTo(dialog)
        dialog.reject()
        assert load_saved(window.store) == []  # Cancel keeps nothing
    finally:
        window.close()


def test_a_saved_remote_serving_another_model_is_listed_not_routed(qtbot, tiny_model_dir, db):
    from app.connections.remote_lanes import SavedRemote, save

    window = open_window(qtbot, tiny_model_dir, db)
    try:
        save(window.store, [SavedRemote("remote", "https://gpu.example/v1", "big-model")])
        from app.connections.remote_lanes import apply_remotes

        assert apply_remotes(window.store, window.engine) == []
        window.scheduler.show_engine(window.engine)
        card = window.scheduler.cards["remote"]
        assert not card.isEnabled() and "not routed" in card.numbers.text()
        assert "big-model" in card.numbers.text()
        assert window.engine.mode == "cpu-only"  # nothing to route to
    finally:
        window.close()


def test_a_remote_model_is_a_model_choice_of_its_own(qtbot, tiny_model_dir, db,
                                                     memory_keyring):  # noqa: F811
    """A remote serving another model (here: the same tiny model under the
    name the server gives it) is used as the window's model: chats go to
    its server, which applies the template; the dock says nothing is routed."""
    from app.connections.remote_lanes import SavedRemote, save

    window = open_window(qtbot, tiny_model_dir, db)
    try:
        with serving(tiny_model_dir) as url:
            save(window.store, [SavedRemote("big", f"{url}/v1")])
            dialog = window.open_remote_lanes()
            with qtbot.waitSignal(window.engine_ready, timeout=60_000):
                dialog._use()
            engine = window.engine
            assert getattr(engine, "is_remote_model", False)
            assert window.status.mode_label.text() == "Remote model"
            assert not window.scheduler.hybrid.isEnabled()
            assert "remote server" in window.scheduler.hybrid_summary.text()
            tab = window.chat_tabs()[0] if window.chat_tabs() else window.new_chat()
            tab.composer.setPlainText("hello there")
            with qtbot.waitSignal(window.bridge.finished, timeout=60_000) as finished:
                tab.send()
            done = finished.args[0]
            assert done.reason in ("stop", "length") and done.lanes[0] == ("prefill", "big")
            qtbot.waitUntil(lambda: not tab.is_streaming, timeout=10_000)
            assert tab.conversation.messages[-1]["content"] == done.text
            assert window.store.setting("model.last") == "remote:big"
    finally:
        window.close()
