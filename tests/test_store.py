"""The chat store on real SQLite files."""

import subprocess
import sys
import textwrap

import pytest

from app.store import MIGRATIONS, ChatStore


@pytest.fixture
def store(tmp_path):
    s = ChatStore(tmp_path / "tandem.db")
    yield s
    s.close()


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


def test_messages_stream_and_truncate(store):
    chat = store.create_chat()
    store.add_message(chat.id, "user", "hi")
    answer = store.add_message(chat.id, "assistant", "", complete=False)
    store.update_message(answer, "Hel")
    store.update_message(answer, "Hello!", complete=True, stats={"footer": "12 tokens"})
    msgs = store.messages(chat.id)
    assert [(m.role, m.content, m.complete) for m in msgs] == [
        ("user", "hi", True), ("assistant", "Hello!", True)]
    assert msgs[1].stats == {"footer": "12 tokens"}
    store.delete_messages_from(answer)
    assert [m.content for m in store.messages(chat.id)] == ["hi"]


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
