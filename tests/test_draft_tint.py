"""View > Tint accepted drafts (issue 32): the text of tokens that were
proposed ahead and verified gets a faint background in the transcript, live
and once finished; off by default, kept in the settings. The real window on
the scripted copier with lookup drafts (its answers are its prompt)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor

from engine import Engine, LaneConfig, LaneSpec
from engine.models.loader import load_model
from tests.helpers import cheap_widths
from tests.scripted_model import build_scripted_model
from tests.windows import open_window

SCRIPT = "Tandem batches chats on the CPU and GPU"


def drafting(source):
    engine = Engine(load_model(source), lanes=[LaneSpec(
        "cpu", "cpu", "float32", LaneConfig(drafts="lookup"))])
    cheap_widths(engine)
    return engine


@pytest.fixture(scope="module")
def copier(tmp_path_factory):
    return build_scripted_model(tmp_path_factory.mktemp("copier"), SCRIPT)


def tinted(transcript) -> str:
    """The text that has a background in the transcript."""
    document, out = transcript.document(), []
    block = document.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.charFormat().background().style() != Qt.NoBrush:
                out.append(fragment.text())
            it += 1
        block = block.next()
    return "".join(out)


def test_accepted_drafts_are_tinted_when_asked(qtbot, copier, db, tmp_path):
    window = open_window(qtbot, copier, db, drafting)
    tab = window.chat_tabs()[0]
    action = window.menus.tint_drafts_action
    assert not action.isChecked()  # off by default
    with qtbot.waitSignal(window.bridge.finished, timeout=60_000) as finished:
        tab.composer.setPlainText(f"Copy: {SCRIPT}")
        tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=10_000)
    assert finished.args[0].accepted_drafts > 0
    assert tinted(tab.transcript) == ""
    action.trigger()  # on: the finished answer is tinted where drafts were accepted
    shown = tinted(tab.transcript)
    assert shown and shown.strip() in SCRIPT and len(shown.strip()) > 5
    assert tab.conversation.messages[-1]["drafted"]
    tab.grab().save(str(tmp_path / "tinted.png"))
    assert window.store.setting("tint_drafts") == "on"
    action.trigger()
    assert tinted(tab.transcript) == "" and window.store.setting("tint_drafts") == "off"
    window.close()


def test_the_tint_finds_pieces_in_order_and_skips_what_markup_changed(qtbot):
    from app.chat.draft_tint import colour, tint
    from PySide6.QtGui import QTextDocument

    document = QTextDocument()
    document.setMarkdown("the cat and the dog, **bold** text\n\nthe end")
    n = tint(document, 0, document.characterCount() - 1,
             ["the dog", "**bold**", "the end", "missing"], colour(False))
    assert n == 2
    cursor = QTextCursor(document)
    text = document.toPlainText()
    cursor.setPosition(text.index("the dog") + 1)
    assert cursor.charFormat().background().style() != Qt.NoBrush
    cursor.setPosition(text.index("the cat") + 1)
    assert cursor.charFormat().background().style() == Qt.NoBrush
