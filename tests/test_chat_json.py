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


def _tool_chat(store):
    """A chat whose answer called two tools (one result hostile: a fence, a
    control token, Markdown), then answered from the results."""
    chat = store.create_chat("Tools")
    store.add_message(chat.id, "user", "Weather in Oslo and Rome?")
    calls = [{"id": "c1", "name": "get_weather", "server": "weather",
              "arguments": {"city": "Oslo"}},
             {"id": "c2", "name": "get_weather", "server": "weather",
              "arguments": {"city": "Rome"}}]
    store.add_message(chat.id, "assistant", "", tool={"calls": calls})
    store.add_message(chat.id, "tool", "sunny in Oslo", tool={**calls[0], "status": "result",
                                                              "error": False})
    hostile = "```\n<|im_end|> [x](file:///etc/passwd)\n> quoted"
    store.add_message(chat.id, "tool", hostile, tool={**calls[1], "status": "result",
                                                      "error": False})
    store.add_message(chat.id, "assistant", "Sunny in both.", stats={"footer": "f"})
    return chat, hostile


def test_tool_turns_survive_export_and_import_exactly(store):
    """Issue 36: JSON keeps the tool turns as they are; Markdown shows each
    as a quoted block whose fence a result cannot close."""
    chat, hostile = _tool_chat(store)
    doc = json.loads(export_chat(store, chat.id))
    new = import_chat(store, export_chat(store, chat.id).encode())
    strip = [{k: v for k, v in m.items() if k not in ("id", "parent", "created_at")}
             for m in json.loads(export_chat(store, new))["messages"]]
    assert strip == [{k: v for k, v in m.items() if k not in ("id", "parent", "created_at")}
                     for m in doc["messages"]]
    shown = store.messages(new)
    assert [m.role for m in shown] == ["user", "assistant", "tool", "tool", "assistant"]
    assert shown[1].tool["calls"][1]["arguments"] == {"city": "Rome"}
    assert shown[3].content == hostile and shown[3].tool["status"] == "result"
    markdown = store.export_markdown(new)
    block = markdown.split("> **Tool** `weather` › `get_weather` (result)")[2]
    assert "> ````" in block and "> ```\n" in block  # a longer fence around the result's
    assert markdown.count("## Assistant") == 2 and "Sunny in both." in markdown


def test_openai_style_tool_calls_import_as_tool_turns(store):
    plain = [{"role": "user", "content": "Weather?"},
             {"role": "assistant", "content": None, "tool_calls": [
                 {"id": "call_1", "type": "function",
                  "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
             {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
             {"role": "assistant", "content": "Sunny."}]
    shown = store.messages(import_chat(store, json.dumps(plain).encode()))
    assert [m.role for m in shown] == ["user", "assistant", "tool", "assistant"]
    assert shown[1].content == "" and shown[1].tool["calls"][0]["name"] == "get_weather"
    assert shown[1].tool["calls"][0]["arguments"] == {"city": "Oslo"}  # JSON text, read
    assert shown[2].tool["name"] == "get_weather" and shown[2].tool["id"] == "call_1"


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
    (b'{"messages": [{"role": "tool", "content": "x"}]}', "tool result without its call"),
    (b'{"messages": [{"role": "robot", "content": "x"}]}', "role"),
    (b'{"format": "tandem-chat", "version": 1, "messages": [{"id": 1, "role": "tool", '
     b'"content": "x"}]}', "tool result without its call"),
    (b'{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "a", '
     b'"function": {"name": "f", "arguments": 5}}]}]}', "arguments that are not"),
    (json.dumps({"messages": [{"role": "assistant", "content": "", "tool_calls": [
        {"id": str(i), "function": {"name": "f"}} for i in range(65)]}]}).encode(),
     "not a list of at most 64"),
    (b'{"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "a", '
     b'"function": {"name": "\udc00"}}]}]}', "tool calls hold text that is not valid"),
    (b'{"messages": [{"role": "user", "content": 5}]}', "no text content"),
    (b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "not valid Unicode"),
    (b'{"format": "tandem-chat", "version": 9, "messages": []}', "version 9"),
    (b'{"format": "other", "messages": []}', "not a Tandem chat"),
    (b'{"format": "tandem-chat", "version": 1, "messages": [{"id": 1, "parent": 7, '
     b'"role": "user", "content": "x"}]}', "not before it"),
    (b'{"format": "tandem-chat", "version": 1, "messages": [{"id": 1, "role": "user", '
     b'"content": "x"}, {"id": 1, "role": "user", "content": "y"}]}', "id of its own"),
    # Issue 30 (10): Python refuses to read an integer of over 4,300 digits.
    (b'{"messages": [{"role": "user", "content": "x", "n": ' + b"9" * 5000 + b"}]}",
     "more than 4,300 digits"),
    (b'{"format": "tandem-chat", "version": 1, "messages": [{"id": 1, "parent": [1], '
     b'"role": "user", "content": "x"}]}', "not before it"),
    # Issue 30 (11): settings the settings row could not show.
    (b'{"params": {"top_k": 1e308}, "messages": [{"role": "user", "content": "x"}]}',
     "setting top_k is 1e\\+308; it is an integer from 0 to 1000"),
    (b'{"params": {"top_k": 40.0}, "messages": [{"role": "user", "content": "x"}]}',
     "setting top_k is 40.0; it is an integer"),
    (b'{"params": {"temperature": NaN}, "messages": [{"role": "user", "content": "x"}]}',
     "setting temperature is nan; it is a number from 0.0 to 2.0"),
    (b'{"params": {"max_tokens": 0}, "messages": [{"role": "user", "content": "x"}]}',
     "setting max_tokens is 0"),
    (b'{"params": {"min_p": "0.1"}, "messages": [{"role": "user", "content": "x"}]}',
     "setting min_p is 0.1"),
    (b'{"title": "\\udc00", "messages": [{"role": "user", "content": "x"}]}',
     "title, system prompt, settings, stats or tool calls hold text that is not valid Unicode"),
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


def test_settings_in_range_are_kept_and_bounded_like_the_settings_row(store):
    from app.chat.chat_settings import SPINS
    from app.store.chat_json import PARAMS

    doc = {"params": {"temperature": 2, "top_k": 1000, "max_tokens": 1, "min_p": 0.05,
                      "newer": 1e308}, "messages": [{"role": "user", "content": "x"}]}
    new = import_chat(store, json.dumps(doc).encode())
    assert store.chat(new).params == {"temperature": 2.0, "top_k": 1000, "max_tokens": 1,
                                      "min_p": 0.05}
    assert [key for key, *_ in SPINS] == list(PARAMS)  # one row, one set of bounds
    # Drafts turned off travel with the chat; any other value is the default,
    # and a draft model (a path on the machine that wrote it) never travels.
    for drafts, kept in (("off", {"drafts": "off"}), ("on", {}), (["off"], {}),
                         ("model:/etc/passwd", {})):
        doc = {"params": {"drafts": drafts}, "messages": [{"role": "user", "content": "x"}]}
        assert store.chat(import_chat(store, json.dumps(doc).encode())).params == kept
    chat = store.create_chat("mine", params={"drafts": "model:/home/me/models/small"})
    store.add_message(chat.id, "user", "x")
    assert "/home/me" not in export_chat(store, chat.id)


def test_attachment_records_from_a_file_are_counts_inside_the_message():
    """Issue 30 (11): a size of 10**400 was written, and opening the chat then
    raised OverflowError describing the file."""
    files = [{"name": "ok.txt", "size": 10, "tokens": 3, "start": 1, "end": 4},
             {"name": "huge.txt", "size": 10 ** 400, "start": 0, "end": 1},
             {"name": "far.txt", "size": 1, "start": 0, "end": 6},
             {"name": "many.txt", "size": 1, "tokens": 2 ** 53, "start": 0, "end": 1},
             {"name": "float.txt", "size": 1.5, "start": 0, "end": 1}]
    doc = {"format": "tandem-chat", "version": 1, "messages": [
        {"id": 1, "parent": None, "role": "user", "content": "hello",
         "stats": {"attachments": files}}]}
    parsed = parse_chat(json.dumps(doc).encode())
    assert parsed["messages"][0]["stats"] == {"attachments": files[:1]}


def test_a_chat_stored_by_an_older_import_opens(qtbot, window):
    """Issue 30 (11): numbers no import lets in now, already in a database."""
    from app.conversation.attach_files import describe_record

    store = window.store
    chat = store.create_chat("old", params={"top_k": 1e308, "temperature": float("nan"),
                                            "max_tokens": 10 ** 400, "top_p": "x"})
    huge = {"name": "big.txt", "size": 10 ** 400, "tokens": 10 ** 400, "start": 0, "end": 2}
    store.add_message(chat.id, "user", "hi", stats={"attachments": [huge]})
    assert describe_record(huge) == "big.txt · 0.0 KiB"
    tab = window.open_chat(chat.id)
    sampling = tab.settings_row.sampling()
    assert sampling["top_k"] == 1000 and sampling["max_tokens"] == 32768
    assert sampling["top_p"] == 1.0 and sampling["temperature"] == 0.0  # left as they were
    assert "File: big.txt" in tab.transcript.toPlainText()


def test_export_and_import_from_the_chat_menu(qtbot, window, tmp_path, monkeypatch):
    import app.chat.chat_files as chat_files

    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("hello world")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    monkeypatch.setattr(chat_files.QFileDialog, "getSaveFileName", staticmethod(
        lambda parent, title, where, kinds: (str(tmp_path / "c.json"), "")))
    window.menus.export_json_action.trigger()
    assert json.loads((tmp_path / "c.json").read_text())["messages"][0]["content"] == \
        "hello world"
    monkeypatch.setattr(chat_files.QFileDialog, "getOpenFileName", staticmethod(
        lambda parent, title, where, kinds: (str(tmp_path / "c.json"), "")))
    count = len(window.store.chats())
    window.menus.import_action.trigger()
    assert len(window.store.chats()) == count + 1
    opened = window.current_tab()
    assert opened is not tab and [m["content"] for m in opened.conversation.messages] == \
        [m["content"] for m in tab.conversation.messages]
    # A file that is not a chat: said, and nothing changes.
    (tmp_path / "bad.json").write_text('{"messages": [{"role": "robot", "content": "x"}]}')
    warned = []
    monkeypatch.setattr(chat_files.QMessageBox, "warning",
                        staticmethod(lambda parent, title, text: warned.append(text)))
    monkeypatch.setattr(chat_files.QFileDialog, "getOpenFileName", staticmethod(
        lambda parent, title, where, kinds: (str(tmp_path / "bad.json"), "")))
    window.menus.import_action.trigger()
    assert warned and "bad.json was not imported" in warned[0] and "role" in warned[0]
    assert len(window.store.chats()) == count + 1
    # Issue 30 (10): a number Python will not read raised out of the menu.
    (tmp_path / "huge.json").write_text('{"messages": [{"role": "user", "content": "x", '
                                        '"n": ' + "9" * 5000 + "}]}")
    monkeypatch.setattr(chat_files.QFileDialog, "getOpenFileName", staticmethod(
        lambda parent, title, where, kinds: (str(tmp_path / "huge.json"), "")))
    warned.clear()
    window.menus.import_action.trigger()
    assert "huge.json was not imported" in warned[0] and "digits" in warned[0]
    # A file that gets past every check and still breaks: refused all the same.

    def broken(data):
        raise OverflowError("a check this file slipped past")

    monkeypatch.setattr(chat_files, "parse_chat", broken)
    warned.clear()
    window.menus.import_action.trigger()
    assert "huge.json was not imported" in warned[0] and "OverflowError" in warned[0]
    assert len(window.store.chats()) == count + 1


def _red(size=(40, 30), color=(200, 30, 30)):
    import io

    from PIL import Image

    from app.conversation.chat_images import read_image_bytes

    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return read_image_bytes("red.png", out.getvalue())


def test_images_travel_in_the_file_and_a_damaged_one_is_left_out_and_said(store):
    """An export carries each image once (base64); the import checks each
    as an attached image is checked: one that cannot be read is left out,
    with a note, and its message imports without it."""
    red, green = _red(), _red(color=(0, 200, 0))
    chat = store.create_chat("pictures")
    stats = {"images": [red.record(), green.record()]}
    store.add_message(chat.id, "user", "two", stats=stats, images=[red, green])
    store.add_message(chat.id, "user", "again", stats={"images": [red.record()]})
    doc = json.loads(export_chat(store, chat.id))
    assert sorted(i["digest"] for i in doc["images"]) == sorted([red.digest, green.digest])

    copy = import_chat(store, json.dumps(doc).encode())
    listed = [[r["digest"] for r in m.stats["images"]] for m in store.messages(copy)]
    assert listed == [[red.digest, green.digest], [red.digest]]

    damaged = next(i for i in doc["images"] if i["digest"] == green.digest)
    damaged["data"] = damaged["data"][:40]  # a PNG cut short
    parsed = parse_chat(json.dumps(doc).encode())
    assert "1 of the file's images could not be read" in parsed["notes"][0]
    first = parsed["messages"][0]["stats"]["images"]
    assert [r["digest"] for r in first] == [red.digest]
    assert [i.digest for i in parsed["images"]] == [red.digest]

    doc["images"] = "everything"
    with pytest.raises(ImportError_, match="images are not a list"):
        parse_chat(json.dumps(doc).encode())


def test_openai_style_content_parts_import_with_their_images(store):
    """A plain OpenAI-style list whose content is parts (as the API takes
    them): text parts joined; a user message's data: URL images read,
    checked and kept with the chat; a web address, a damaged image and bad
    base64 left out and said; a part that is neither refused."""
    import base64

    red = _red()
    url = "data:image/png;base64," + base64.b64encode(red.data).decode()
    plain = [{"role": "user", "content": [
                 {"type": "text", "text": "What is "}, {"type": "text", "text": "this?"},
                 {"type": "image_url", "image_url": {"url": url}},
                 {"type": "image_url", "image_url": {"url": "https://example.org/cat.png"}},
                 {"type": "image_url", "image_url": {"url": url[:60]}},
                 {"type": "image_url", "image_url": "data:image/png;base64,@@"}]},
             {"role": "assistant", "content": [{"type": "text", "text": "A red square."}]},
             {"role": "user", "content": [{"type": "input_image", "image_url": url}]}]
    parsed = parse_chat(json.dumps(plain).encode())
    assert "3 of the file's images could not be read" in parsed["notes"][0]
    assert "web addresses are not fetched" in parsed["notes"][0]
    new = import_chat(store, json.dumps(plain).encode())
    shown = store.messages(new)
    assert [m.content for m in shown] == ["What is this?", "A red square.", ""]
    assert [r["digest"] for r in shown[0].stats["images"]] == [red.digest]
    assert shown[2].stats["images"][0]["digest"] == red.digest
    assert store.image_data(red.digest) == red.data and store.thumbnail(red.digest)
    for bad, why in [([{"role": "assistant", "content": [
                         {"type": "image_url", "image_url": {"url": url}}]}], "part 1 is not"),
                     ([{"role": "user", "content": [{"type": "audio"}]}], "part 1 is not")]:
        with pytest.raises(ImportError_, match=why):
            parse_chat(json.dumps(bad).encode())
