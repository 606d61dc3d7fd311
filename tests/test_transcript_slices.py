"""A long chat opens with its newest messages and the rest arrives in slices
(app/chat/transcript_slices.py): the window never renders it all at once, and
everything that depends on the transcript still works while it fills in."""

import re

import pytest
from PySide6.QtCore import QUrl
from PySide6.QtGui import QGuiApplication, QTextCursor

from app.chat.chat_tab import ChatTab
from app.conversation.conversation import Conversation
from app.chat.transcript import Transcript
from tests.test_transcript import hrefs_between


def _chat(count, text="message {i}"):
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": text.format(i=i),
             "id": i + 1} for i in range(count)]


def _tab(qtbot, messages, footers=None, versions=None):
    tab = ChatTab(conversation=Conversation(messages, footers, versions))
    qtbot.addWidget(tab)
    return tab


def _done(qtbot, tab):
    qtbot.waitUntil(lambda: not tab.transcript.slicing, timeout=60_000)


def _top(tab, index):
    """Where message `index` starts, in the view's coordinates."""
    cursor = QTextCursor(tab.transcript.document())
    cursor.setPosition(tab.transcript.message_starts[index])
    return tab.transcript.cursorRect(cursor).top()


def _same_html(a, b):
    """The two transcripts' documents, alike but for each view's key and the
    order their copy links were numbered in."""
    def normal(t):
        html = t.toHtml().replace(t._key, "KEY")
        return re.sub(r"copy/(\d+)", lambda m: "copy:" + t.code_blocks[int(m.group(1))], html)
    return normal(a) == normal(b)


@pytest.fixture
def counted(monkeypatch):
    """How many messages have been rendered so far."""
    rendered = []
    real = Transcript._render
    monkeypatch.setattr(Transcript, "_render",
                        lambda self, cursor, index, *rest: rendered.append(index)
                        or real(self, cursor, index, *rest))
    return rendered


def test_a_long_chat_opens_with_its_newest_messages_and_the_rest_follows(qtbot, counted):
    tab = _tab(qtbot, _chat(2_000))
    # Rendered before the tab exists: the newest messages only, a bounded number.
    assert len(counted) <= Transcript.SYNC_MESSAGES
    assert counted == list(range(2_000 - len(counted), 2_000))
    transcript = tab.transcript
    assert transcript.slicing and transcript.earlier.text().startswith(f"{2_000 - len(counted):,}")
    _done(qtbot, tab)
    # The newest AUTO_MESSAGES came by themselves; the rest waits to be asked for.
    assert transcript.first_rendered == 2_000 - Transcript.AUTO_MESSAGES
    assert sorted(counted) == list(range(transcript.first_rendered, 2_000))
    assert "1,000 earlier messages" in transcript.earlier.text()
    transcript.earlier.linkActivated.emit("earlier")
    _done(qtbot, tab)
    assert transcript.first_rendered == 2_000 - Transcript.AUTO_MESSAGES - Transcript.PAGE
    transcript.show_earlier()
    _done(qtbot, tab)
    assert transcript.first_rendered == 0 and transcript.earlier.isHidden()
    assert sorted(counted) == list(range(2_000))  # each message rendered once
    starts = [transcript.message_starts[i] for i in range(2_000)]
    assert starts == sorted(starts) and starts[0] == 0


def test_a_document_built_in_slices_is_the_one_built_at_once(qtbot, monkeypatch):
    body = "Item **{i}**.\n\n- one\n- two\n\n```python\nx = {i}\n```\n\n> quoted"
    messages = _chat(120, body)
    for i, message in enumerate(messages):
        if i % 7 == 1:
            message.update(reasoning="thinking\n\nmore", thinking_open=i % 14 == 1)
        if i % 11 == 1:
            message.update(format="json", content='{"a": %d}' % i)
    footers = {i: f"footer {i}" for i in range(1, 120, 2)}
    versions = {m["id"]: [m["id"], 999] for m in messages[::5]}
    whole = Transcript
    monkeypatch.setattr(whole, "SYNC_MESSAGES", 10**9)
    at_once = _tab(qtbot, [dict(m) for m in messages], footers=footers, versions=versions)
    monkeypatch.setattr(whole, "SYNC_MESSAGES", 5)
    sliced = _tab(qtbot, [dict(m) for m in messages], footers=footers, versions=versions)
    assert sliced.transcript.slicing and not at_once.transcript.slicing
    _done(qtbot, sliced)
    assert _same_html(sliced.transcript, at_once.transcript)
    assert dict(sliced.transcript.message_starts) == dict(at_once.transcript.message_starts)


def test_scroll_to_an_old_message_renders_it_first(qtbot):
    tab = _tab(qtbot, _chat(2_000, "message {i}\n\nwith a second paragraph"))
    tab.resize(500, 300)
    tab.show()
    qtbot.waitExposed(tab)
    assert 10 not in tab.transcript.message_starts
    assert tab.scroll_to(11)  # stored id 11: message 10, far above what opened
    qtbot.waitUntil(lambda: 10 in tab.transcript.message_starts and not tab.transcript.slicing,
                    timeout=60_000)
    assert abs(_top(tab, 10)) <= 2 and tab.transcript.verticalScrollBar().value() > 0
    assert tab.transcript.first_rendered == 10  # what was needed, not the whole chat
    assert not tab.scroll_to(5_000)


def test_a_new_conversation_mid_slicing_replaces_the_old_one(qtbot):
    tab = _tab(qtbot, _chat(600, "old {i}"))
    assert tab.transcript.slicing
    qtbot.waitUntil(lambda: tab.transcript.first_rendered < 560, timeout=10_000)
    tab.show_history(_chat(300, "new {i}"), {}, {})  # ‹ › to another branch
    _done(qtbot, tab)
    text = tab.transcript.toPlainText()
    assert "old " not in text
    assert [int(n) for n in re.findall(r"new (\d+)", text)] == list(range(300))
    assert sorted(tab.transcript.message_starts) == list(range(300))


def test_an_answer_streams_at_the_bottom_while_older_slices_arrive(qtbot):
    tab = _tab(qtbot, _chat(600))
    tab.resize(500, 400)
    tab.show()
    transcript = tab.transcript
    tab.composer.setPlainText("one more")
    tab.send_button.setEnabled(True)
    tab.send()
    for word in "the answer arrives word by word".split():
        first = transcript.first_rendered
        tab.append_text(word + " ")
        if first > 0:  # a slice lands above the answer between two flushes
            qtbot.waitUntil(lambda: transcript.first_rendered < first, timeout=10_000)
    assert transcript.toPlainText().rstrip().endswith("word by word")

    class Done:
        reason, error, lanes, output_tokens, tokens_per_s = "stop", None, (), 6, None
        ttft_s, cached_tokens, prompt_tokens = None, 0, 10
    tab.finish(Done())
    _done(qtbot, tab)
    text = transcript.toPlainText()
    assert text.count("the answer arrives word by word") == 1 and "…" not in text
    assert [int(n) for n in re.findall(r"message (\d+)", text)] == list(range(600))
    assert text.index("message 599") < text.index("one more") < text.index("word by word")
    starts = [transcript.message_starts[i] for i in range(602)]
    assert starts == sorted(starts)
    bar = transcript.verticalScrollBar()
    assert bar.value() == bar.maximum()  # still following the end


def test_action_links_keep_their_message_on_old_and_new_slices(qtbot):
    messages = _chat(300, "message {i}\n\n```python\nvalue = {i}\n```")
    tab = _tab(qtbot, messages)
    _done(qtbot, tab)
    transcript = tab.transcript
    for index in (0, 1, 150, 298, 299):  # the first slices, the middle, the newest
        end = transcript.message_starts.get(index + 1, 10**9)
        hrefs = hrefs_between(tab, transcript.message_starts[index], end)
        kind = "edit" if index % 2 == 0 else "regen"
        assert transcript.action_href(kind, index) in hrefs
        assert transcript.action_href("copymsg", index) in hrefs
        copy = [h for h in hrefs if "/copy/" in h]
        tab.transcript.anchorClicked.emit(QUrl(copy[0]))
        assert QGuiApplication.clipboard().text() == f"value = {index}"
    transcript.anchorClicked.emit(QUrl(transcript.action_href("edit", 0)))
    assert tab.editing == 0 and tab.composer.toPlainText().startswith("message 0")


def test_what_the_user_looks_at_stays_put_while_older_slices_arrive(qtbot):
    tab = _tab(qtbot, _chat(600, "message {i}\n\n" + "a line of text\n\n" * 3))
    tab.resize(500, 300)
    tab.show()
    qtbot.waitExposed(tab)
    transcript = tab.transcript
    index = transcript.first_rendered + 5
    assert transcript.slicing and tab.scroll_to(index + 1)  # stored ids start at 1
    assert abs(_top(tab, index)) <= 2
    _done(qtbot, tab)
    assert transcript.first_rendered == 0
    assert abs(_top(tab, index)) <= 2  # the slices went in above it, out of sight
