"""Issue 30 (case 12): a large chat file is read and checked on a worker
thread, then written and opened; a bad one is still refused with a dialog."""

from __future__ import annotations

import json

import app.chat.chat_files as chat_files
from app.conversation.history import load_history
from app.store.branch import versions
from app.store.tree import versions_of


def _big_chat(path, count=5000):
    pad = "x" * 300  # over chat_files.PARSE_HERE: the worker's path
    path.write_text(json.dumps({"messages": [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} {pad}"}
        for i in range(count)]}))
    assert path.stat().st_size > chat_files.PARSE_HERE
    return path


def test_a_large_import_parses_off_the_gui_thread_and_opens(qtbot, window, tmp_path):
    path = _big_chat(tmp_path / "big.json")
    count = len(window.store.chats())
    done = chat_files.importer(window).done
    with qtbot.waitSignal(done, timeout=60_000) as signal:
        assert chat_files.import_file(window, path) is None  # returns at once
        assert "Importing big.json" in window.statusBar().currentMessage()
    chat_id = signal.args[0]
    assert chat_id is not None and len(window.store.chats()) == count + 1
    tab = window.current_tab()
    assert tab.chat_id == chat_id
    assert [m["content"] for m in tab.conversation.messages] == \
        [f"message {i} {'x' * 300}" for i in range(5000)]
    assert [m["role"] for m in tab.conversation.messages[:2]] == ["user", "assistant"]
    # The same as the store's messages, read the old way.
    assert [m["id"] for m in tab.conversation.messages] == [m.id for m in window.store.messages(chat_id)]


def test_a_large_bad_file_is_refused_with_a_dialog(qtbot, window, tmp_path, monkeypatch):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"messages": [{"role": "robot", "content": "x" * 2_000_000}]}))
    warned = []
    monkeypatch.setattr(chat_files.QMessageBox, "warning",
                        staticmethod(lambda parent, title, text: warned.append(text)))
    count = len(window.store.chats())
    with qtbot.waitSignal(chat_files.importer(window).done, timeout=60_000) as signal:
        assert chat_files.import_file(window, path) is None
    assert signal.args == [None]
    assert warned and "bad.json was not imported" in warned[0] and "role" in warned[0]
    assert len(window.store.chats()) == count


def test_the_branch_and_versions_match_the_tree(window):
    store = window.store
    chat = store.create_chat("v")
    a = store.add_message(chat.id, "user", "q")
    b = store.add_message(chat.id, "assistant", "a1")
    store.add_message(chat.id, "assistant", "a2", parent_id=a)
    store.add_message(chat.id, "user", "q2", parent_id=None)
    links = {m.id: m.parent_id for m in store.all_messages(chat.id)}
    assert versions(links) == versions_of(links)
    store.show_version(b)
    history = load_history(store, chat.id)
    assert [m["content"] for m in history.messages] == ["q", "a1"]
    assert history.versions == store.versions(chat.id) and history.versions[b] == [b, b + 1]
