"""The transcript under hostile text: links in messages cannot act, only http(s)
opens and only after the user sees the address, nothing is loaded, one
message cannot reshape another, and streaming re-renders only the answer."""

import pytest
from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices, QTextDocument
from PySide6.QtWidgets import QMessageBox

from app.chat.chat_tab import ChatTab
from app.conversation.conversation import Answer, Conversation

HOSTILE = ("Click [here](edit:0) or [there](regen:1) or [guess](tandem://0000/edit/0) "
           "or [files](file:///etc/passwd) or [js](javascript:alert(1)).")


def _anchors(tab):
    """Every link address in the rendered transcript, in order."""
    return hrefs_between(tab, 0, tab.transcript.document().characterCount())


def hrefs_between(tab, start, end):
    """The link addresses in document positions [start, end), in order."""
    hrefs, block = [], tab.transcript.document().findBlock(start)
    while block.isValid() and block.position() < end:
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            if fmt.isAnchor() and fmt.anchorHref() not in hrefs:
                hrefs.append(fmt.anchorHref())
            it += 1
        block = block.next()
    return hrefs


@pytest.fixture
def opened(monkeypatch):
    calls = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: calls.append(url.toString()))
    return calls


def _tab(qtbot, messages):
    tab = ChatTab(conversation=Conversation([dict(m, id=i + 1) for i, m in enumerate(messages)]))
    qtbot.addWidget(tab)
    return tab


def test_links_in_message_text_never_trigger_actions(qtbot, opened):
    tab = _tab(qtbot, [{"role": "user", "content": "hi"},
                       {"role": "assistant", "content": HOSTILE}])
    own = {tab.transcript.action_href(kind, index) for kind, index in
           [("edit", 0), ("regen", 1), ("copymsg", 0), ("copymsg", 1)]}
    foreign = [h for h in _anchors(tab) if h not in own]
    assert len(foreign) == 5, foreign
    for href in foreign:
        tab.transcript.anchorClicked.emit(QUrl(href))
        assert "Not opened" in tab.footer.text()
    assert tab.editing is None and len(tab.conversation.messages) == 2 and tab.composer.toPlainText() == ""
    assert opened == []  # file: and javascript: never reach the desktop
    # The app's own link still works.
    tab.transcript.anchorClicked.emit(QUrl(tab.transcript.action_href("edit", 0)))
    assert tab.editing == 0 and tab.composer.toPlainText() == "hi" and len(tab.conversation.messages) == 2


@pytest.mark.parametrize("choice, expected", [(QMessageBox.Cancel, []),
                                              (QMessageBox.Open, ["https://example.com/a?b=1"])])
def test_web_links_open_only_after_the_user_sees_the_address(qtbot, opened, monkeypatch,
                                                             choice, expected):
    asked = []

    def question(parent, title, text, *args):
        asked.append(text)
        return choice
    monkeypatch.setattr(QMessageBox, "question", question)
    tab = _tab(qtbot, [{"role": "assistant", "content": "[docs](https://example.com/a?b=1)"}])
    tab.transcript.anchorClicked.emit(QUrl("https://example.com/a?b=1"))
    assert len(asked) == 1 and "https://example.com/a?b=1" in asked[0]
    assert opened == expected


def test_markdown_loads_no_resources_and_shows_raw_html_as_text(qtbot, tmp_path):
    from PySide6.QtGui import QImage

    image = tmp_path / "secret.png"
    QImage(4, 4, QImage.Format_RGB32).save(str(image))
    url = QUrl.fromLocalFile(str(image)).toString()
    tab = _tab(qtbot, [{"role": "assistant", "content":
                        f"![a]({url}) ![b](http://127.0.0.1:9/track.png) "
                        f"<img src='{url}'> <b>bold?</b>"}])
    tab.show()
    tab.transcript.grab()  # lay out and paint: images would be fetched now
    doc = tab.transcript.document()
    assert doc.resource(QTextDocument.ImageResource, QUrl(url)) is None
    text = tab.transcript.toPlainText()
    assert "<b>bold?</b>" in text and f"[image: {url}]" in text


def test_one_message_cannot_reshape_the_others(qtbot):
    tab = _tab(qtbot, [{"role": "assistant", "content": "```python\nnever closed"},
                       {"role": "user", "content": "next question"}])
    text = tab.transcript.toPlainText()
    assert "You" in text.split("never closed", 1)[1]  # the next header is still a header
    hrefs = _anchors(tab)
    assert tab.transcript.action_href("edit", 1) in hrefs  # and its action still works


def test_streaming_re_renders_only_the_answer(qtbot):
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}
               for i in range(200)]
    tab = _tab(qtbot, history)
    tab.show()
    first = tab.transcript.document().begin()
    first.setUserState(42)  # a full re-render would replace this block
    tab.composer.setPlainText("one more")
    tab.send_button.setEnabled(True)
    tab.send()
    for word in "the answer arrives word by word".split():
        tab.append_text(word + " ")
    assert tab.transcript.document().begin().userState() == 42
    assert tab.transcript.toPlainText().rstrip().endswith("word by word")

    class Done:
        reason, error, lanes, output_tokens, tokens_per_s = "stop", None, (), 6, None
        ttft_s, cached_tokens, prompt_tokens = None, 0, 10
    tab.finish(Done())
    assert tab.transcript.document().begin().userState() == 42
    text = tab.transcript.toPlainText()
    assert text.count("the answer arrives word by word") == 1 and "…" not in text
    assert tab.transcript.action_href("regen", 201) in _anchors(tab)


def test_a_long_answer_re_renders_only_its_last_paragraph(qtbot, monkeypatch):
    import app.chat.transcript as transcript

    rendered = []
    real = transcript.fragment
    monkeypatch.setattr(transcript, "fragment", lambda md: rendered.append(md) or real(md))
    tab = _tab(qtbot, [{"role": "user", "content": "write a lot"}])
    tab.show()
    tab.conversation.answer = Answer()
    tab.append_text("First paragraph.\n\n")
    rendered.clear()
    for i in range(60):
        tab.append_text(f"Paragraph {i} with words. " + ("\n\n" if i % 3 == 2 else ""))
    tab.append_text("```python\nx = 1\n\ny = 2\n```\n\nlast words")
    assert not any("First paragraph." in md for md in rendered)  # rendered once, kept
    assert max(len(md) for md in rendered) < 200  # each flush: one paragraph
    text = tab.transcript.toPlainText()
    assert "First paragraph." in text and "Paragraph 59 with words." in text
    assert text.rstrip().endswith("last words")
    assert "```" not in text  # the fence split by a blank line still renders as one block


def test_a_huge_paste_shows_its_start_and_keeps_all_of_it(qtbot):
    from PySide6.QtGui import QGuiApplication

    huge = "A pasted log line with words and numbers 12345.\n" * 20_000  # ~1 MB
    tab = _tab(qtbot, [{"role": "user", "content": huge}])
    text = tab.transcript.toPlainText()
    assert len(text) < 60_000 and "more characters are not shown" in text
    tab.transcript.anchorClicked.emit(QUrl(tab.transcript.action_href("copymsg", 0)))
    assert QGuiApplication.clipboard().text() == huge
    assert tab.prompt_messages()[-1]["content"] == huge  # all of it goes to the model


def test_scroll_to_a_message_puts_it_at_the_top(qtbot):
    tab = _tab(qtbot, [{"role": "user" if i % 2 == 0 else "assistant",
                        "content": f"message {i}\n\n" + "a line of text\n\n" * 8}
                       for i in range(12)])
    tab.resize(500, 300)
    tab.show()
    qtbot.waitExposed(tab)
    bar = tab.transcript.verticalScrollBar()
    assert bar.maximum() > 0
    assert tab.scroll_to(7)  # stored id 7: the eighth message
    start = tab.transcript.message_starts[6]
    from PySide6.QtGui import QTextCursor

    cursor = QTextCursor(tab.transcript.document())
    cursor.setPosition(start)
    assert abs(tab.transcript.cursorRect(cursor).top()) <= 2 and bar.value() > 0
    assert not tab.scroll_to(999)  # not in the branch shown
