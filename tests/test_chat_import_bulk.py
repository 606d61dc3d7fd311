"""Issue 30 (case 12): a large import is written and read back on a worker
thread with its own connections (app/store/bulk_write.py), into ids reserved
on the GUI thread; a write that cannot be made is refused, leaving nothing."""

from __future__ import annotations

import json
import sqlite3

import app.chat.chat_files as chat_files
from app.conversation.history import load_history
from app.store import bulk_write


def _big_tree(path, count=3000):
    """A Tandem export over PARSE_HERE: one branch, and a second version of
    message 2 (so the History has versions), its leaf on the long branch."""
    pad = "y" * 400
    messages = [{"id": i, "parent": i - 1 if i > 1 else None,
                 "role": "user" if i % 2 else "assistant", "content": f"m{i} {pad}"}
                for i in range(1, count + 1)]
    messages.append({"id": count + 1, "parent": 1, "role": "assistant", "content": "other"})
    path.write_text(json.dumps({"format": "tandem-chat", "version": 1, "title": "Big",
                                "leaf": count, "messages": messages}))
    assert path.stat().st_size > chat_files.PARSE_HERE
    return path


def _rows(db):
    with sqlite3.connect(db) as c:
        return (c.execute("SELECT COUNT(*) FROM chats").fetchone()[0],
                c.execute("SELECT COUNT(*) FROM messages").fetchone()[0])


def test_a_locked_database_refuses_the_import_and_writes_nothing(qtbot, window, db, tmp_path,
                                                                 monkeypatch):
    path = _big_tree(tmp_path / "big.json")
    warned = []
    monkeypatch.setattr(chat_files.QMessageBox, "warning",
                        staticmethod(lambda parent, title, text: warned.append(text)))
    monkeypatch.setattr(bulk_write, "BUSY_TIMEOUT_MS", 50)
    store = window.store
    assert store.pending == 0
    before = _rows(db)
    chats = len(store.chats())
    locker = sqlite3.connect(db, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")  # another program holds the write lock
    try:
        with qtbot.waitSignal(chat_files.importer(window).done, timeout=60_000) as signal:
            assert chat_files.import_file(window, path) is None
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert signal.args == [None]
    assert len(warned) == 1 and "big.json was not imported" in warned[0]
    assert "could not be written" in warned[0] and "locked" in warned[0]
    assert _rows(db) == before and len(store.chats()) == chats
    assert chat_files.importer(window).running == 0
    # The store's next own writes work, on ids nothing took.
    chat = store.create_chat("after")
    first = store.add_message(chat.id, "user", "hello")
    second = store.add_message(chat.id, "assistant", "hi")
    assert store.pending == 0 and [m.id for m in store.messages(chat.id)] == [first, second]
    assert _rows(db) == (before[0] + 1, before[1] + 2)


def test_an_imported_chat_then_new_writes_get_fresh_ids(qtbot, window, db, tmp_path):
    path = _big_tree(tmp_path / "big.json")
    store = window.store
    importer = chat_files.importer(window)
    meanwhile = []

    def write_meanwhile(*_):  # after the importer's slot: ids reserved, worker started
        chat = store.create_chat("meanwhile")
        meanwhile.append((chat.id, store.add_message(chat.id, "user", "while importing")))
    importer._parsed.connect(write_meanwhile)
    with qtbot.waitSignal(importer.done, timeout=60_000) as signal:
        assert chat_files.import_file(window, path) is None
    chat_id = signal.args[0]
    assert chat_id is not None and store.pending == 0
    (other_chat, other_message), = meanwhile
    assert other_chat != chat_id
    imported = store.all_messages(chat_id)
    assert len(imported) == 3001 and other_message not in {m.id for m in imported}
    assert [m.content for m in store.messages(other_chat)] == ["while importing"]
    # The tab shows what load_history reads: the branch, versions, ids.
    tab = window.current_tab()
    assert tab.chat_id == chat_id and store.chat(chat_id).title == "Big"
    history = load_history(store, chat_id)
    assert [m["id"] for m in tab.conversation.messages] == [m["id"] for m in history.messages]
    assert len(history.messages) == 3000 and len(history.versions) == 2
    assert tab.conversation.versions == history.versions
    # A new message in the imported chat gets a fresh id and ends its branch.
    new = store.add_message(chat_id, "user", "next")
    assert new > max(m.id for m in imported) and new != other_message
    assert store.messages(chat_id)[-1].id == new
    assert store.create_chat("later").id > max(chat_id, other_chat)


def test_a_tab_opened_meanwhile_is_brought_forward(qtbot, window, tmp_path):
    path = _big_tree(tmp_path / "big.json")
    importer = chat_files.importer(window)
    opened = []

    def open_early(_path, chat_id, _history, _count):  # before the importer's _open
        opened.append(window.open_chat(chat_id))
    importer._written.connect(open_early)
    with qtbot.waitSignal(importer.done, timeout=60_000) as signal:
        chat_files.import_file(window, path)
    assert [t.chat_id for t in opened] == [signal.args[0]]
    assert [t.chat_id for t in window.chat_tabs()].count(signal.args[0]) == 1
    assert window.current_tab() is opened[0]


def test_a_large_import_with_images_writes_them_on_the_worker(qtbot, window, tmp_path):
    """A file over PARSE_HERE is written by the worker's own connection:
    its images go in the same transaction, and a damaged one is said."""
    import base64
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 30, 30)).save(out, "PNG")
    path = _big_tree(tmp_path / "big.json", count=3000)
    doc = json.loads(path.read_text())
    doc["messages"][0]["stats"] = {"images": [
        {"digest": "f" * 32, "name": "red.png", "width": 40, "height": 30, "format": "png",
         "size": len(out.getvalue())},
        {"digest": "e" * 32, "name": "cut.png", "width": 40, "height": 30, "format": "png",
         "size": 9}]}
    doc["images"] = [{"digest": "f" * 32, "format": "png",
                      "data": base64.b64encode(out.getvalue()).decode()},
                     {"digest": "e" * 32, "format": "png",
                      "data": base64.b64encode(out.getvalue()[:9]).decode()}]
    path.write_text(json.dumps(doc))
    importer = chat_files.importer(window)
    with qtbot.waitSignal(importer.done, timeout=60_000) as signal:
        assert chat_files.import_file(window, path) is None
    chat_id = signal.args[0]
    first = window.store.messages(chat_id)[0]
    record, = first.stats["images"]  # the damaged one left out
    assert record["name"] == "red.png" and window.store.image_data(record["digest"]) == \
        out.getvalue()
    assert "1 of the file's images could not be read" in window.statusBar().currentMessage()
