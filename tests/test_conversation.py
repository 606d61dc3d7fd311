"""A conversation in the window, on the real engine: edit and regenerate
(the last message and earlier ones), per-chat settings and the context
meter, answer footers, code blocks, and a prompt longer than the context."""

from PySide6.QtCore import Qt

from tests.windows import open_window as _open_window


def test_regenerate_and_edit_last_message_keep_versions(qtbot, tiny_model_dir, db):
    window = _open_window(qtbot, tiny_model_dir, db)
    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("hello world")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    first_answer = tab.conversation.messages[-1]["content"]
    assert tab.regenerate_button.isEnabled()
    qtbot.mouseClick(tab.regenerate_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    stored = window.store.messages(tab.chat_id)
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[1].content == tab.conversation.messages[-1]["content"] == first_answer  # greedy
    assert len(window.store.all_messages(tab.chat_id)) == 3  # the first answer stays
    assert tab.version(1) == (2, 2) and "‹ 2/2 ›" in tab.transcript.toPlainText()
    meter = tab.context_meter.value()
    # Edit: nothing changes until the edit is sent; Esc puts the draft back.
    tab.composer.setPlainText("a draft")
    qtbot.mouseClick(tab.edit_button, Qt.LeftButton)
    assert tab.composer.toPlainText() == "hello world" and len(tab.conversation.messages) == 2
    assert not tab.edit_row.isHidden() and tab.editing == 0
    assert len(window.store.all_messages(tab.chat_id)) == 3
    assert tab.context_meter.value() == meter
    window.menus.stop_action.trigger()  # Esc
    assert tab.editing is None and tab.edit_row.isHidden()
    assert tab.composer.toPlainText() == "a draft" and len(tab.conversation.messages) == 2
    tab.edit_message(0)
    qtbot.mouseClick(tab.cancel_edit_button, Qt.LeftButton)  # Cancel edit, the same
    assert tab.composer.toPlainText() == "a draft" and tab.editing is None
    tab.edit_message(0)
    tab.composer.setPlainText("café")
    tab.send()
    assert tab.edit_row.isHidden() and [m["content"] for m in tab.conversation.messages] == ["café"]
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    assert [m.content for m in window.store.messages(tab.chat_id)][0] == "café"
    assert tab.version(0) == (2, 2) and tab.version(1) is None
    # ‹ goes back to the first question, with its newest answer.
    _click_link(qtbot, tab, "prev", 0)
    assert [m["content"] for m in tab.conversation.messages] == ["hello world", first_answer]
    assert tab.version(0) == (1, 2) and tab.version(1) == (2, 2)
    assert tab.conversation.footers[1] in tab.transcript.toPlainText()
    # An edit that cannot be sent (longer than the context) changes nothing:
    # the branch stays, the text stays in the composer, still an edit.
    tab.edit_message(0)
    long_text = " ".join(["river"] * 2000)
    tab.composer.setPlainText(long_text)
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=30_000)
    assert tab.footer.text().startswith("⚠") and tab.composer.toPlainText() == long_text
    assert [m["content"] for m in tab.conversation.messages] == ["hello world", first_answer]
    assert tab.editing == 0 and not tab.edit_row.isHidden()
    assert len(window.store.all_messages(tab.chat_id)) == 5
    window.menus.stop_action.trigger()
    # Going on from the version switched back to: its prefix is still cached.
    tab.composer.setPlainText("and then?")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    assert window.store.messages(tab.chat_id)[-1].stats["cached_tokens"] > 0
    assert [m["content"] for m in tab.conversation.messages][:2] == ["hello world", first_answer]
    window.close()
    again = _open_window(qtbot, tiny_model_dir, db)  # the branch shown is kept
    restored = again.chat_tabs()[0]
    assert [m["content"] for m in restored.conversation.messages][:2] == ["hello world", first_answer]
    _click_link(qtbot, restored, "next", 0)
    assert [m["content"] for m in restored.conversation.messages][0] == "café"
    again.close()


def test_esc_stops_an_answer_being_written(qtbot, tiny_model_dir, db):
    from tests.windows import paced_cpu_engine

    window = _open_window(qtbot, tiny_model_dir, db, factory=paced_cpu_engine(0.05))
    tab = window.chat_tabs()[0]
    tab.max_tokens.setValue(400)
    tab.composer.setPlainText("hello world")
    tab.send()
    qtbot.waitUntil(lambda: bool(tab.conversation.streaming_text), timeout=60_000)
    window.menus.stop_action.trigger()  # Esc
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    assert window.store.messages(tab.chat_id)[-1].stats["reason"] == "cancelled"
    window.close()


def test_chat_settings_apply_persist_and_context_meter(qtbot, tiny_model_dir, db):
    w = _open_window(qtbot, tiny_model_dir, db)
    tab = w.chat_tabs()[0]
    qtbot.mouseClick(tab.settings_toggle, Qt.LeftButton)
    assert not tab.settings_row.isHidden()
    tab.system_prompt.setText("You answer in French.")
    tab.system_prompt.editingFinished.emit()
    tab.max_tokens.setValue(5)
    seen = []
    w.engine.subscribe(lambda e: seen.append(e) if type(e).__name__ == "Queued" else None)
    tab.composer.setPlainText("hello world")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    stats = w.store.messages(tab.chat_id)[-1].stats
    assert stats["output_tokens"] <= 5
    with_system = w.engine.render([{"role": "system", "content": "You answer in French."},
                                   {"role": "user", "content": "hello world"}])
    assert seen[-1].prompt_tokens == len(with_system)
    assert tab.context_meter.maximum() == 512
    assert tab.context_meter.value() == len(with_system) + stats["output_tokens"]
    chat = w.store.chat(tab.chat_id)
    assert chat.system_prompt == "You answer in French." and chat.params["max_tokens"] == 5
    w.close()
    again = _open_window(qtbot, tiny_model_dir, db)
    restored = again.chat_tabs()[0]
    assert restored.system_prompt.text() == "You answer in French."
    assert restored.max_tokens.value() == 5
    again.close()


def test_answer_footer_and_code_copy_link(qtbot, window):
    from PySide6.QtCore import QUrl
    from PySide6.QtGui import QGuiApplication

    tab = window.chat_tabs()[0]
    tab.conversation.messages = [{"role": "user", "content": "code please"},
                    {"role": "assistant", "content": "Here:\n```python\nprint('hi')\n```\nDone."}]
    tab.conversation.footers = {1: "prefill CPU → decode CPU · 3 tokens"}
    tab.render()
    text = tab.transcript.toPlainText()
    assert "Copy code" in text and "prefill CPU → decode CPU" in text
    assert tab.code_blocks == ["print('hi')"]
    tab.transcript.anchorClicked.emit(QUrl(tab.transcript.action_href("copy", 0)))
    assert QGuiApplication.clipboard().text() == "print('hi')"
    # A real answer gets its footer under it, and keeps it after a restart.
    tab.conversation.messages, tab.conversation.footers = [], {}
    tab.composer.setPlainText("hello world")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    assert tab.conversation.footers[1].startswith("prefill CPU")
    assert tab.conversation.footers[1] in tab.transcript.toPlainText()


def test_code_blocks_are_highlighted(qtbot, window):
    from PySide6.QtGui import QTextFormat

    tab = window.chat_tabs()[0]
    tab.conversation.messages = [{"role": "assistant", "content": "```python\ndef f():\n    return 1\n```"}]
    tab.render()
    doc = tab.transcript.document()
    block = doc.begin()
    while block.isValid() and not block.blockFormat().hasProperty(QTextFormat.BlockCodeFence):
        block = block.next()
    assert block.isValid() and block.text().startswith("def f")
    colours = {r.format.foreground().color().name() for r in block.layout().formats()}
    assert "#d73a49" in colours  # 'def' is a keyword


def test_prompt_longer_than_the_context_keeps_the_text_and_the_tab(qtbot, window):
    tab, other = window.chat_tabs()[0], window.new_chat()
    long_text = " ".join(["river"] * 2000)  # the tiny model's context is 512 tokens
    tab.composer.setPlainText(long_text)
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=30_000)
    assert "context" in tab.footer.text() and tab.footer.text().startswith("⚠")
    assert tab.composer.toPlainText() == long_text  # nothing typed is lost
    assert not tab.is_streaming and tab.conversation.messages == []
    assert window.store.messages(tab.chat_id) == []  # nothing half-stored
    for t in (tab, other):  # this tab and the others keep working
        t.composer.setPlainText("hello world")
        t.send()
    qtbot.waitUntil(lambda: not tab.is_streaming and not other.is_streaming, timeout=60_000)
    assert tab.conversation.messages[-1]["role"] == other.conversation.messages[-1]["role"] == "assistant"


def _click_link(qtbot, tab, kind, index):
    """Click one of the app's links in the transcript as a user would."""
    from PySide6.QtCore import QUrl

    href = tab.transcript.action_href(kind, index)
    assert f"({href})" in tab.transcript.toMarkdown()
    tab.transcript.anchorClicked.emit(QUrl(href))


def test_edit_or_regenerate_an_earlier_message(qtbot, tiny_model_dir, db):
    w = _open_window(qtbot, tiny_model_dir, db)
    tab = w.chat_tabs()[0]
    for text in ("first question", "second question", "third question"):
        tab.composer.setPlainText(text)
        tab.send()
        qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    assert [m.role for m in w.store.messages(tab.chat_id)] == ["user", "assistant"] * 3
    first_answer = tab.conversation.messages[1]["content"]
    # Regenerate the first answer: a new version; the rest stays in the old one.
    _click_link(qtbot, tab, "regen", 1)
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    stored = w.store.messages(tab.chat_id)
    assert [m.content for m in stored] == ["first question", first_answer]  # greedy
    assert tab.prompt_messages() == [{"role": m.role, "content": m.content} for m in stored]
    assert len(w.store.all_messages(tab.chat_id)) == 7
    # Edit the first question: in the composer; sent, it is a new first message.
    _click_link(qtbot, tab, "edit", 0)
    assert tab.composer.toPlainText() == "first question" and len(tab.conversation.messages) == 2
    tab.composer.setPlainText("first question, edited")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    w.close()
    again = _open_window(qtbot, tiny_model_dir, db)
    (restored,) = [t for t in again.chat_tabs() if t.chat_id == tab.chat_id]
    assert [m["content"] for m in restored.conversation.messages][0] == "first question, edited"
    assert restored.prompt_messages() == tab.prompt_messages()
    # Nothing was lost: back to the first question, then to its first answer's
    # branch: the whole first conversation is there.
    _click_link(qtbot, restored, "prev", 0)
    _click_link(qtbot, restored, "prev", 1)
    assert [m["content"] for m in restored.conversation.messages][::2] == [
        "first question", "second question", "third question"]
    again.close()


def test_a_chat_can_ask_for_json_and_shows_it_formatted(qtbot, window):
    """Chat settings > Answer: JSON matching a schema: the answer is held to
    the schema (constrained decoding) and shown as formatted JSON; the choice
    is stored with the chat; a schema that is not JSON is said, not sent."""
    import json

    import jsonschema

    tab = window.chat_tabs()[0] if window.chat_tabs() else window.new_chat()
    settings = tab.settings_row
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0,
                                                      "maximum": 9}},
              "required": ["n"], "additionalProperties": False}
    settings.format.setCurrentIndex(settings.format.findData("json_schema"))
    settings.schema.setPlainText("{not json")
    assert "not valid JSON" in settings.schema_error.text()
    tab.composer.setPlainText("a number please")
    tab.send()
    qtbot.waitUntil(lambda: "not valid JSON" in tab.footer.text(), timeout=10_000)
    settings.schema.setPlainText(json.dumps(schema))
    assert settings.schema_error.text() == ""
    with qtbot.waitSignal(window.bridge.finished, timeout=60_000) as finished:
        tab.composer.setPlainText("a number please")
        tab.send()
    done = finished.args[0]
    assert done.reason == "stop"
    jsonschema.validate(json.loads(done.text), schema)
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=10_000)
    assert tab.conversation.messages[-1]["format"] == "json"
    shown = tab.transcript.toPlainText()
    assert json.dumps(json.loads(done.text), indent=2) in shown
    stored = window.store.chat(tab.chat_id).params
    assert stored["answer_format"] == {"type": "json_schema", "schema": json.dumps(schema)}


def test_drafts_are_a_chat_setting_kept_with_the_chat(qtbot, tiny_model_dir, db):
    """Chat settings > Drafts: off asks the engine for no drafts (its
    answer says why none were made), is stored with the chat, and comes
    back with it; auto leaves the engine to draft where it pays."""
    from engine import Engine, LaneConfig, LaneSpec
    from engine.models.loader import load_model

    def drafting(source):
        return Engine(load_model(source), lanes=[LaneSpec(
            "cpu", "cpu", "float32", LaneConfig(drafts="lookup"))])

    window = _open_window(qtbot, tiny_model_dir, db, drafting)
    tab = window.chat_tabs()[0]
    settings = tab.settings_row
    assert settings.drafts.currentData() == "auto"
    with qtbot.waitSignal(window.bridge.finished, timeout=60_000) as finished:
        tab.composer.setPlainText("one two one two one two")
        tab.send()
    assert finished.args[0].draft_note is None
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=10_000)
    settings.drafts.setCurrentIndex(settings.drafts.findData("off"))
    with qtbot.waitSignal(window.bridge.finished, timeout=60_000) as finished:
        tab.composer.setPlainText("one two one two one two")
        tab.send()
    done = finished.args[0]
    assert done.draft_note == "draft_tokens is 0" and done.drafted == 0
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=10_000)
    qtbot.waitUntil(lambda: window.store.chat(tab.chat_id).params.get("drafts") == "off",
                    timeout=10_000)
    window.close()
    again = _open_window(qtbot, tiny_model_dir, db, drafting)
    (restored,) = [t for t in again.chat_tabs() if t.chat_id == tab.chat_id]
    assert restored.settings_row.drafts.currentData() == "off"
    assert restored.settings_row.request_extras() == {"draft_tokens": 0}
    again.close()
