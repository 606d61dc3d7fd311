"""A chat drafts with a smaller model of the same family (issue 32): the
chat settings list the library's models that can draft for the loaded one,
a chat that picks one has the engine load it off the GUI thread (the dock's
memory plan shows it), the choice is kept with the chat, and a model that
cannot draft is said in the status bar while the chat answers by lookup.
Real windows, real engines on tiny random llamas built with one tokenizer."""

from __future__ import annotations


import pytest

from app.models.model_library import ADDED_KEY
from engine import Engine, LaneConfig, LaneSpec
from engine.models.loader import load_model
from tests.helpers import foreign_tokenizer_copy
from tests.tiny_model import build_tiny_llama
from tests.windows import open_window


def drafting(source):
    return Engine(load_model(source), lanes=[LaneSpec(
        "cpu", "cpu", "float32", LaneConfig(drafts="lookup"))])


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A smaller llama with the tiny model's tokenizer: it can draft for it."""
    return build_tiny_llama(tmp_path_factory.mktemp("small-draft"), seed=1, num_layers=1,
                            hidden=32)


def _chat(window, drafts: str):
    """A new chat whose Drafts setting is `drafts` and whose answers are short."""
    tab = window.new_chat()
    settings = tab.settings_row
    settings.spins["max_tokens"].setValue(12)
    settings.drafts.setCurrentIndex(settings.drafts.findData(drafts))
    assert settings.drafts.currentData() == drafts
    return tab


def _send(qtbot, window, tab, text):
    with qtbot.waitSignal(window.bridge.finished, timeout=60_000) as finished:
        tab.composer.setPlainText(text)
        tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=10_000)
    return finished.args[0]


def test_a_chat_drafts_with_a_smaller_model_of_its_family(qtbot, tiny_model_dir, small, db,
                                                          tmp_path):
    from app.store import ChatStore

    store = ChatStore(db)
    foreign = foreign_tokenizer_copy(small, tmp_path / "foreign-small")
    store.set_setting(ADDED_KEY, [str(tiny_model_dir), str(small), str(foreign)])
    window = open_window(qtbot, tiny_model_dir, store, drafting)
    tab = window.chat_tabs()[0]
    settings = tab.settings_row
    listed = [settings.drafts.itemData(i) for i in range(settings.drafts.count())]
    assert listed[:2] == ["auto", "off"]
    assert f"model:{small}" in listed and f"model:{foreign}" in listed
    assert f"model:{tiny_model_dir}" not in listed  # not itself, nor a larger one
    plain = _send(qtbot, window, _chat(window, "auto"), "hello world")
    tab = _chat(window, f"model:{small}")
    with qtbot.waitSignal(window.session.drafts.loaded, timeout=60_000):
        _send(qtbot, window, tab, "hello world")
    assert window.engine.draft_model.name == small.name
    assert "Draft model" in window.scheduler.memory.text()
    again = _send(qtbot, window, _chat(window, f"model:{small}"), "hello world")
    assert again.text == plain.text  # drafts never change the answer
    qtbot.waitUntil(lambda: window.store.chat(tab.chat_id).params.get("drafts")
                    == f"model:{small}", timeout=10_000)
    # One that cannot draft (another tokenizer): said, and the chat still answers.
    with qtbot.waitSignal(window.session.drafts.failed, timeout=60_000) as failed:
        done = _send(qtbot, window, _chat(window, f"model:{foreign}"), "hello world")
    assert "tokenizer" in failed.args[1] and done.text == plain.text
    window.session.drafts.wait()
    qtbot.waitUntil(lambda: "draft model did not load" in window.statusBar().currentMessage(),
                    timeout=5_000)
    window.close()
    again = open_window(qtbot, tiny_model_dir, store, drafting)
    (restored,) = [t for t in again.chat_tabs() if t.chat_id == tab.chat_id]
    assert restored.settings_row.draft_model() == str(small)
    assert restored.settings_row.request_extras() == {"drafter": "model"}
    again.close()
