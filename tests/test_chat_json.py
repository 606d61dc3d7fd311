"""Chats to JSON and back: every branch, the thinking and the stats survive a
round trip; OpenAI-style message lists import as one branch; hostile or
broken files are refused with the reason and write nothing."""

import json

import pytest

from app.store.chat_json import ImportError_, export_chat, import_chat, parse_chat


def _tree(store):
    chat = store.create_chat("Trip", system_prompt="Be brief.", params={"temperature": 0.3})
    q1 = store.add_message(chat.id, "user", "q1")
    a1 = store.add_message(chat.id, "assistant", "a1", stats={"footer": "f", "thinking_s": 1.5,
                                                             "output_tokens": 3})
    store.update_message(a1, "a1", reasoning="thinking about q1")
    store.add_message(chat.id, "assistant", "a1 again", parent_id=q1)
    store.add_message(chat.id, "user", "q1 edited", parent_id=None)
    store.show_version(a1)
    return chat


def test_a_round_trip_keeps_every_branch(store, tmp_path):
    chat = _tree(store)
    text = export_chat(store, chat.id)
    doc = json.loads(text)
    assert doc["format"] == "tandem-chat" and len(doc["messages"]) == 4
    new = import_chat(store, text.encode())
    assert new != chat.id
    assert store.chat(new).title == "Trip" and store.chat(new).system_prompt == "Be brief."
    assert store.chat(new).params == {"temperature": 0.3}
    assert [(m.role, m.content, m.reasoning) for m in store.messages(new)] == [
        ("user", "q1", ""), ("assistant", "a1", "thinking about q1")]  # the branch shown
    assert store.messages(new)[1].stats == {"footer": "f", "thinking_s": 1.5, "output_tokens": 3}
    assert len(store.all_messages(new)) == 4
    versions = store.versions(new)
    assert sorted(len(v) for v in set(map(tuple, versions.values()))) == [2, 2]
    # Exported again, it is the same chat (ids renumbered).
    again = json.loads(export_chat(store, new))
    strip = [{k: v for k, v in m.items() if k not in ("id", "parent", "created_at")}
             for m in again["messages"]]
    assert strip == [{k: v for k, v in m.items() if k not in ("id", "parent", "created_at")}
                     for m in doc["messages"]]


def test_openai_style_messages_import_as_one_branch(store):
    plain = {"messages": [{"role": "system", "content": "sys"},
                          {"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "hello", "reasoning_content": "hm"}]}
    new = import_chat(store, json.dumps(plain).encode())
    shown = store.messages(new)
    assert [(m.role, m.content) for m in shown] == [
        ("system", "sys"), ("user", "hi"), ("assistant", "hello")]
    assert shown[-1].reasoning == "hm" and store.chat(new).title == "Imported chat"
    bare = import_chat(store, json.dumps(plain["messages"][1:]).encode())
    assert len(store.messages(bare)) == 2


@pytest.mark.parametrize("data, why", [
    (b"\xff\xfe", "not UTF-8"),
    (b"{not json", "not valid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
    (b'{"title": "x"}', "no list of messages"),
    (b'{"messages": []}', "no messages"),
    (b'{"messages": [{"role": "tool", "content": "x"}]}', "role"),
    (b'{"messages": [{"role": "user", "content": 5}]}', "no text content"),
    (b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "not valid Unicode"),
    (b'{"format": "tandem-chat", "version": 9, "messages": []}', "version 9"),
    (b'{"format": "other", "messages": []}', "not a Tandem chat"),
    (b'{"format": "tandem-chat", "version": 1, "messages": [{"id": 1, "parent": 7, '
     b'"role": "user", "content": "x"}]}', "not before it"),
    (b'{"format": "tandem-chat", "version": 1, "messages": [{"id": 1, "role": "user", '
     b'"content": "x"}, {"id": 1, "role": "user", "content": "y"}]}', "id of its own"),
])
def test_broken_or_hostile_files_are_refused_and_write_nothing(store, data, why):
    before = (len(store.chats()), store.schema_version)
    with pytest.raises(ImportError_, match=why):
        import_chat(store, data)
    assert (len(store.chats()), store.schema_version) == before


def test_stats_from_a_file_are_checked_field_by_field():
    doc = {"format": "tandem-chat", "version": 1, "messages": [
        {"id": 1, "parent": None, "role": "assistant", "content": "x",
         "stats": {"thinking_s": "soon", "output_tokens": True, "footer": "ok", "evil": [1],
                   "lanes": [["prefill", "cpu"]], "ttft_s": -1}}]}
    parsed = parse_chat(json.dumps(doc).encode())
    assert parsed["messages"][0]["stats"] == {"footer": "ok", "lanes": [["prefill", "cpu"]]}


def test_export_and_import_from_the_chat_menu(qtbot, window, tmp_path, monkeypatch):
    import app.chat_files as chat_files

    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("hello world")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    monkeypatch.setattr(chat_files.QFileDialog, "getSaveFileName", staticmethod(
        lambda parent, title, where, kinds: (str(tmp_path / "c.json"), "")))
    window.export_json_action.trigger()
    assert json.loads((tmp_path / "c.json").read_text())["messages"][0]["content"] == \
        "hello world"
    monkeypatch.setattr(chat_files.QFileDialog, "getOpenFileName", staticmethod(
        lambda parent, title, where, kinds: (str(tmp_path / "c.json"), "")))
    count = len(window.store.chats())
    window.import_action.trigger()
    assert len(window.store.chats()) == count + 1
    opened = window.current_tab()
    assert opened is not tab and [m["content"] for m in opened.messages] == \
        [m["content"] for m in tab.messages]
    # A file that is not a chat: said, and nothing changes.
    (tmp_path / "bad.json").write_text('{"messages": [{"role": "tool", "content": "x"}]}')
    warned = []
    monkeypatch.setattr(chat_files.QMessageBox, "warning",
                        staticmethod(lambda parent, title, text: warned.append(text)))
    monkeypatch.setattr(chat_files.QFileDialog, "getOpenFileName", staticmethod(
        lambda parent, title, where, kinds: (str(tmp_path / "bad.json"), "")))
    window.import_action.trigger()
    assert warned and "bad.json was not imported" in warned[0] and "role" in warned[0]
    assert len(window.store.chats()) == count + 1
