"""The chat store on real SQLite files."""

import subprocess
import sys
import textwrap

import pytest

from app.store import MIGRATIONS, ChatStore


def test_chats_crud_search_and_cascade(store):
    a = store.create_chat("Paris trip", system_prompt="Be brief.", params={"temperature": 0.2})
    b = store.create_chat("Rust questions")
    store.add_message(b.id, "user", "What is a lifetime?")
    store.add_message(a.id, "user", "Best museums?")
    assert [c.id for c in store.chats()] == [a.id, b.id]  # most recent first
    assert [c.id for c in store.chats("lifetime")] == [b.id]
    assert [c.id for c in store.chats("paris")] == [a.id]
    # Search is literal: % and _ are not wildcards, a backslash is a backslash.
    c = store.create_chat("100% sure")
    store.add_message(c.id, "user", "snake_case and C:\\temp")
    assert [x.id for x in store.chats("%")] == [c.id]
    assert [x.id for x in store.chats("e_c")] == [c.id]
    assert [x.id for x in store.chats("a_e")] == []  # not 'ake' in 'snake'
    assert [x.id for x in store.chats("C:\\t")] == [c.id]
    store.delete_chat(c.id)
    renamed = store.update_chat(b.id, title="Rust")
    assert renamed.title == "Rust" and renamed.params == {}
    assert store.chat(a.id).params == {"temperature": 0.2}
    store.delete_chat(a.id)
    assert [c.id for c in store.chats()] == [b.id]
    assert store.messages(a.id) == []


def test_messages_stream(store):
    chat = store.create_chat()
    store.add_message(chat.id, "user", "hi")
    answer = store.add_message(chat.id, "assistant", "", complete=False)
    store.update_message(answer, "Hel")
    store.update_message(answer, "Hello!", complete=True, stats={"footer": "12 tokens"})
    msgs = store.messages(chat.id)
    assert [(m.role, m.content, m.complete) for m in msgs] == [
        ("user", "hi", True), ("assistant", "Hello!", True)]
    assert msgs[1].stats == {"footer": "12 tokens"}
    assert msgs[1].parent_id == msgs[0].id and msgs[0].parent_id is None


def test_branches_keep_every_version(store, tmp_path):
    chat = store.create_chat()
    q1 = store.add_message(chat.id, "user", "q1")
    a1 = store.add_message(chat.id, "assistant", "a1")
    q2 = store.add_message(chat.id, "user", "q2")
    a2 = store.add_message(chat.id, "assistant", "a2")
    # Regenerate a1: a sibling answer; the path shown ends there.
    a1b = store.add_message(chat.id, "assistant", "a1, again", parent_id=q1)
    assert [m.content for m in store.messages(chat.id)] == ["q1", "a1, again"]
    assert store.versions(chat.id) == {a1: [a1, a1b], a1b: [a1, a1b]}
    # Edit the first question: a second root.
    q1b = store.add_message(chat.id, "user", "q1 edited", parent_id=None)
    store.add_message(chat.id, "assistant", "a1 for the edit")
    assert [m.content for m in store.messages(chat.id)] == ["q1 edited", "a1 for the edit"]
    assert store.versions(chat.id)[q1b] == [q1, q1b]
    # Back to the first version: below it, its newest branch.
    store.show_version(q1)
    assert [m.content for m in store.messages(chat.id)] == ["q1", "a1, again"]
    store.show_version(a1)
    assert [m.id for m in store.messages(chat.id)] == [q1, a1, q2, a2]
    assert len(store.all_messages(chat.id)) == 7  # nothing was deleted
    assert [c.id for c in store.chats("a1 for the")] == [chat.id]  # search sees every branch
    again = ChatStore(tmp_path / "tandem.db")  # the shown path is stored
    assert [m.id for m in again.messages(chat.id)] == [q1, a1, q2, a2]
    again.close()
    with pytest.raises(KeyError):
        store.show_version(12345)


def _version_1_file(path):
    """A database as Tandem wrote it before branches (schema version 1)."""
    import sqlite3

    con = sqlite3.connect(path, isolation_level=None)
    con.executescript(MIGRATIONS[0])
    con.execute("PRAGMA user_version = 1")
    con.execute("INSERT INTO chats VALUES (1, 'old', '', '{}', 0, 0)")
    con.execute("INSERT INTO chats VALUES (2, 'empty', '', '{}', 0, 0)")
    for i, (role, text) in enumerate([("user", "q1"), ("assistant", "a1"), ("user", "q2"),
                                      ("assistant", "a2")]):
        con.execute("INSERT INTO messages (id, chat_id, role, content, created_at) "
                    "VALUES (?, 1, ?, ?, 0)", (10 + i, role, text))
    con.close()


@pytest.mark.parametrize("read_only", [False, True])
def test_a_version_1_database_becomes_a_tree_losing_nothing(tmp_path, read_only):
    path = tmp_path / "v1.db"
    _version_1_file(path)
    store = ChatStore.open_read_only(path) if read_only else ChatStore(path)
    try:
        assert store.schema_version == len(MIGRATIONS) == 5
        shown = store.messages(1)
        assert [m.content for m in shown] == ["q1", "a1", "q2", "a2"]
        assert [m.parent_id for m in shown] == [None, 10, 11, 12]
        assert store.versions(1) == {} and store.messages(2) == []
        store.add_message(1, "assistant", "a2, again", parent_id=12)  # works on the copy too
        assert [m.content for m in store.messages(1)][-1] == "a2, again"
    finally:
        store.close()


def _version_3_file(path):
    """A database as Tandem wrote it before tool turns (schema version 3): a
    chat with an edited question (two branches) and a reasoning answer."""
    import sqlite3

    con = sqlite3.connect(path, isolation_level=None)
    for script in MIGRATIONS[:3]:
        con.executescript(script)
    con.execute("PRAGMA user_version = 3")
    con.execute("INSERT INTO chats (id, title, system_prompt, params, created_at, updated_at, "
                "leaf_id) VALUES (1, 'old', '', '{}', 0, 0, 13)")
    for mid, parent, role, text in [(10, None, "user", "q1"), (11, 10, "assistant", "a1"),
                                    (12, None, "user", "q1, edited"),
                                    (13, 12, "assistant", "a1'")]:
        con.execute("INSERT INTO messages (id, chat_id, role, content, created_at, parent_id, "
                    "reasoning) VALUES (?, 1, ?, ?, 0, ?, ?)", (mid, role, text, parent,
                                                                "hm" if mid == 13 else ""))
    con.execute("INSERT INTO open_tabs VALUES (0, 1, 1)")
    con.close()


@pytest.mark.parametrize("read_only", [False, True])
def test_a_version_3_database_takes_tool_turns_losing_nothing(tmp_path, read_only):
    """Schema 4 rebuilds the messages table (SQLite cannot change a CHECK):
    ids, links, branches, thinking and the open tabs survive; the links still
    cascade; a tool turn can be stored and an unknown role still cannot."""
    import sqlite3

    path = tmp_path / "v3.db"
    _version_3_file(path)
    store = ChatStore.open_read_only(path) if read_only else ChatStore(path)
    try:
        assert store.schema_version == len(MIGRATIONS)
        shown = store.messages(1)
        assert [(m.id, m.parent_id, m.content, m.reasoning) for m in shown] == [
            (12, None, "q1, edited", ""), (13, 12, "a1'", "hm")]
        assert store.versions(1) == {10: [10, 12], 12: [10, 12]}
        assert store.open_tabs() == ([1], 1)
        calls = {"calls": [{"id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}]}
        store.update_message(13, "a1'", tool=calls)
        result = store.add_message(1, "tool", "sunny", parent_id=13, tool={
            "id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"},
            "status": "result", "error": False})
        shown = store.messages(1)
        assert shown[-2].tool == calls and shown[-1].role == "tool"
        assert shown[-1].parent_id == 13 and shown[-1].tool["name"] == "get_weather"
        with pytest.raises(sqlite3.IntegrityError):
            store._db.execute("INSERT INTO messages (chat_id, role, content, created_at) "
                              "VALUES (1, 'bogus', 'x', 0)")
        store.delete_chat(1)
        assert store.all_messages(1) == [] and result
    finally:
        store.close()
    if not read_only:
        con = sqlite3.connect(path)
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
        assert {r[1] for r in con.execute("PRAGMA index_list(messages)")} >= {
            "messages_by_chat", "messages_by_parent"}
        con.close()


def test_settings_tabs_and_schema(store, tmp_path):
    store.set_setting("mode", "hybrid")
    store.set_setting("mode", "gpu-only")
    assert store.setting("mode") == "gpu-only"
    assert store.setting("missing", 3) == 3
    chats = [store.create_chat(f"c{i}") for i in range(3)]
    store.save_open_tabs([chats[2].id, chats[0].id], current=chats[0].id)
    assert store.open_tabs() == ([chats[2].id, chats[0].id], chats[0].id)
    assert store.schema_version == len(MIGRATIONS)
    again = ChatStore(tmp_path / "tandem.db")  # reopening migrates nothing
    assert again.open_tabs() == ([chats[2].id, chats[0].id], chats[0].id)
    again.close()


def test_answer_survives_a_killed_process(tmp_path):
    db = tmp_path / "crash.db"
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(__import__('pathlib').Path(__file__).resolve().parents[1])!r})
        from app.store import ChatStore
        s = ChatStore({str(db)!r})
        c = s.create_chat("crash")
        m = s.add_message(c.id, "assistant", "", complete=False)
        s.update_message(m, "partial answer, flushed")
        os._exit(9)  # killed mid-stream: no close, no commit at exit
    """)
    proc = subprocess.run([sys.executable, "-c", script])
    assert proc.returncode == 9
    store = ChatStore(db)
    (chat,) = store.chats()
    (msg,) = store.messages(chat.id)
    assert msg.content == "partial answer, flushed" and not msg.complete
    store.close()


def test_export_markdown(store):
    chat = store.create_chat("Export me", system_prompt="Be kind.")
    store.add_message(chat.id, "user", "Show code")
    store.add_message(chat.id, "assistant", "```python\nprint(1)\n```", stats={"footer": "x"})
    md = store.export_markdown(chat.id)
    assert md.startswith("# Export me\n")
    assert "## You\n\nShow code" in md and "```python\nprint(1)\n```" in md
    assert "> System: Be kind." in md and "*x*" in md
    assert "<details>" not in md
    store.add_message(chat.id, "user", "Think first")
    answer = store.add_message(chat.id, "assistant", "")
    store.update_message(answer, "42", reasoning="six times seven")
    md = store.export_markdown(chat.id)
    assert "<details><summary>Thinking</summary>\n\nsix times seven\n\n</details>\n\n42" in md


def test_newer_schema_is_refused(tmp_path):
    import sqlite3

    path = tmp_path / "future.db"
    con = sqlite3.connect(path)
    con.execute("PRAGMA user_version = 99")
    con.close()
    before = path.read_bytes()
    with pytest.raises(RuntimeError, match="newer Tandem"):
        ChatStore(path)
    assert path.read_bytes() == before  # refused before anything wrote (not even WAL mode)


def _image(color=(200, 30, 30), size=(40, 30)):
    import io

    from PIL import Image

    from app.conversation.chat_images import read_image_bytes

    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return read_image_bytes("red.png", out.getvalue())


@pytest.mark.parametrize("read_only", [False, True])
def test_a_version_4_database_takes_images_and_forgets_them_with_their_chats(tmp_path,
                                                                           read_only):
    """Schema 5 adds the images table: a version-4 file opens (and a
    read-only copy of one), an image is kept once for every message that
    lists it, and goes when the last chat listing it is deleted; a stats cell
    that is not JSON does not stop that."""
    import sqlite3

    path = tmp_path / "v4.db"
    con = sqlite3.connect(path, isolation_level=None)
    for script in MIGRATIONS[:4]:
        con.executescript(script)
    con.execute("PRAGMA user_version = 4")
    con.execute("INSERT INTO chats (id, title, system_prompt, params, created_at, updated_at) "
                "VALUES (1, 'old', '', '{}', 0, 0)")
    con.execute("INSERT INTO messages (id, chat_id, role, content, stats, created_at) "
                "VALUES (5, 1, 'user', 'hi', 'not json', 0)")
    con.close()
    store = ChatStore.open_read_only(path) if read_only else ChatStore(path)
    try:
        assert store.schema_version == len(MIGRATIONS) == 5
        assert [m.content for m in store.messages(1)] == ["hi"]
        red, green = _image(), _image((0, 200, 0))
        a, b = store.create_chat(), store.create_chat()
        store.add_message(a.id, "user", "look", stats={"images": [red.record()]}, images=[red])
        store.add_message(b.id, "user", "both", stats={"images": [red.record(), green.record()]},
                          images=[red, green])
        assert store.image_data(red.digest) == red.data
        assert store.thumbnail(green.digest) == green.thumb
        store.delete_chat(b.id)
        assert store.image_data(red.digest) == red.data  # chat a still lists it
        assert store.image_data(green.digest) is None
        store.delete_chat(a.id)
        assert store.image_data(red.digest) is None and store.thumbnail(red.digest) is None
        assert [m.content for m in store.messages(1)] == ["hi"]
    finally:
        store.close()


def test_an_image_written_while_the_database_is_locked_survives_a_restart(tmp_path):
    """The pending journal is JSON: an image's bytes wait in it as base64
    and reach the database whole at the next start."""
    from tests.test_db_holder import LockHolder

    path = tmp_path / "held.db"
    store = ChatStore(path, retry=(60.0, 60.0))
    red = _image()
    chat = store.create_chat()
    with LockHolder(path):
        store.add_message(chat.id, "user", "look", stats={"images": [red.record()]},
                          images=[red])
        assert store.pending >= 1
        assert store.image_data(red.digest) == red.data  # readable while it waits
        left = store.close(timeout=0.2)
    assert left >= 1
    store = ChatStore(path)
    try:
        assert store.pending == 0
        assert store.image_data(red.digest) == red.data
        assert store.messages(chat.id)[0].stats["images"][0]["digest"] == red.digest
    finally:
        store.close()
