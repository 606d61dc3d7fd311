"""A conversation in the window, on the real engine: edit and regenerate
(the last message and earlier ones), per-chat settings and the context
meter, answer footers, code blocks, and a prompt longer than the context."""

from PySide6.QtCore import Qt

from tests.windows import open_window as _open_window


def test_regenerate_and_edit_last_message(qtbot, window):
    tab = window.chat_tabs()[0]
    tab.composer.setPlainText("hello world")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    first_answer = tab.messages[-1]["content"]
    assert tab.regenerate_button.isEnabled()
    qtbot.mouseClick(tab.regenerate_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    stored = window.store.messages(tab.chat_id)
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[1].content == tab.messages[-1]["content"] == first_answer  # greedy
    qtbot.mouseClick(tab.edit_button, Qt.LeftButton)
    assert tab.composer.toPlainText() == "hello world" and tab.messages == []
    assert window.store.messages(tab.chat_id) == []
    tab.composer.setPlainText("café")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    assert [m.content for m in window.store.messages(tab.chat_id)][0] == "café"


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
    tab.messages = [{"role": "user", "content": "code please"},
                    {"role": "assistant", "content": "Here:\n```python\nprint('hi')\n```\nDone."}]
    tab.footers = {1: "prefill CPU → decode CPU · 3 tokens"}
    tab.render()
    text = tab.transcript.toPlainText()
    assert "Copy code" in text and "prefill CPU → decode CPU" in text
    assert tab.code_blocks == ["print('hi')"]
    tab.transcript.anchorClicked.emit(QUrl(tab.transcript.action_href("copy", 0)))
    assert QGuiApplication.clipboard().text() == "print('hi')"
    # A real answer gets its footer under it, and keeps it after a restart.
    tab.messages, tab.footers = [], {}
    tab.composer.setPlainText("hello world")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    assert tab.footers[1].startswith("prefill CPU")
    assert tab.footers[1] in tab.transcript.toPlainText()


def test_code_blocks_are_highlighted(qtbot, window):
    from PySide6.QtGui import QTextFormat

    tab = window.chat_tabs()[0]
    tab.messages = [{"role": "assistant", "content": "```python\ndef f():\n    return 1\n```"}]
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
    assert not tab.is_streaming and tab.messages == []
    assert window.store.messages(tab.chat_id) == []  # nothing half-stored
    for t in (tab, other):  # this tab and the others keep working
        t.composer.setPlainText("hello world")
        t.send()
    qtbot.waitUntil(lambda: not tab.is_streaming and not other.is_streaming, timeout=60_000)
    assert tab.messages[-1]["role"] == other.messages[-1]["role"] == "assistant"


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
    first_answer = tab.messages[1]["content"]
    # Regenerate the first answer: what came after it goes, here and stored.
    _click_link(qtbot, tab, "regen", 1)
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    stored = w.store.messages(tab.chat_id)
    assert [m.content for m in stored] == ["first question", first_answer]  # greedy
    assert tab.conversation() == [{"role": m.role, "content": m.content} for m in stored]
    # Edit the first question: it returns to the composer, the rest goes.
    _click_link(qtbot, tab, "edit", 0)
    assert tab.composer.toPlainText() == "first question" and tab.messages == []
    assert w.store.messages(tab.chat_id) == []
    tab.composer.setPlainText("first question, edited")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    w.close()
    again = _open_window(qtbot, tiny_model_dir, db)
    (restored,) = [t for t in again.chat_tabs() if t.chat_id == tab.chat_id]
    assert [m["content"] for m in restored.messages][0] == "first question, edited"
    assert restored.conversation() == tab.conversation()
    again.close()
