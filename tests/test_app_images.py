"""Images in the app (issue 37), offscreen with the real window: a tiny
random SmolVLM on a CPU lane (tests/vision_models.py), real SQLite.

Attach (the button's file dialog), drop and paste put an image in the
composer with its thumbnail; Send stores it (schema 5) and the vision model
reads it (the answer equals the engine's own for the same chat); the next
turn reuses the prefix with the image in it; the transcript shows the
thumbnail and a click opens it full size; a restart, Edit, and export /
import keep it; a text model says before sending that it cannot read
images; a damaged image is refused saying why."""

from __future__ import annotations

import io
import json

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent, QGuiApplication, QImage
from PySide6.QtWidgets import QFileDialog

from engine import SamplingParams
from tests.vision_models import build_qwen25_vl, build_smolvlm
from tests.windows import open_window


@pytest.fixture(scope="module")
def smolvlm(tmp_path_factory):
    return build_smolvlm(tmp_path_factory.mktemp("smolvlm") / "model")


@pytest.fixture(scope="module")
def qwen_vl(tmp_path_factory):
    return build_qwen25_vl(tmp_path_factory.mktemp("qwen_vl") / "model")


def _png(path, color, size=(64, 48)) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    path.write_bytes(out.getvalue())
    return out.getvalue()


def _greedy(tab, n=6) -> None:
    tab.apply_settings("", {**tab.settings_row.stored(), "temperature": 0.0, "max_tokens": n})


def _attach_by_button(qtbot, tab, monkeypatch, *paths) -> None:
    monkeypatch.setattr(QFileDialog, "getOpenFileNames",
                        staticmethod(lambda *a, **k: ([str(p) for p in paths], "")))
    before = len(tab.attachment_bar.images)
    qtbot.mouseClick(tab.attach_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: tab.attachment_bar.pending == 0 and
                    len(tab.attachment_bar.images) == before + len(paths), timeout=30_000)


def _send(qtbot, tab, text: str) -> None:
    tab.composer.setPlainText(text)
    qtbot.mouseClick(tab.send_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=120_000)


@pytest.mark.parametrize("family", ["smolvlm", "qwen_vl"])
def test_an_attached_image_is_read_stored_shown_and_reused(qtbot, family, request, db,
                                                           tmp_path, monkeypatch):
    red = _png(tmp_path / "red.png", (200, 30, 30))
    window = open_window(qtbot, request.getfixturevalue(family), db)
    tab = window.current_tab()
    assert tab.images_refusal is None  # the vision model reads images
    _greedy(tab)
    _attach_by_button(qtbot, tab, monkeypatch, tmp_path / "red.png")
    image = tab.attachment_bar.images[0]
    assert (image.width, image.height, image.format) == (64, 48, "png")
    assert image.thumb.startswith(b"\x89PNG") and not tab.attachment_bar.isHidden()
    _send(qtbot, tab, "What colour is it?")
    assert not tab.attachment_bar.images  # sent with the message

    # Stored: the message lists it, the store keeps its bytes and thumbnail.
    stored = window.store.messages(tab.chat_id)
    assert [m.role for m in stored] == ["user", "assistant"]
    record = stored[0].stats["images"][0]
    assert record["digest"] == image.digest and record["name"] == "red.png"
    assert window.store.image_data(image.digest) == red

    # The model read the image: the answer is the engine's own for this chat.
    from engine import decode_image

    engine = window.engine
    chat = [{"role": "user", "content": "What colour is it?", "images": [decode_image(red)],
             "parts": [{"type": "image", "index": 0},
                       {"type": "text", "text": "What colour is it?"}]}]
    direct = engine.submit(engine.prepare(chat), SamplingParams(temperature=0.0, max_tokens=6))
    direct.result(120)
    answer = tab.conversation.messages[-1]["content"]
    assert answer == engine.tokenizer.decode(list(direct.request.output_ids))
    first_prompt = stored[1].stats["prompt_tokens"]

    # The thumbnail is in the transcript, a link; clicking it opens the image.
    assert tab.transcript.images and tab.transcript.images[0]["digest"] == image.digest
    tab._on_action("image", 0)
    viewer = tab._viewer
    assert (viewer.pixmap.width(), viewer.pixmap.height()) == (64, 48)
    viewer.close()

    # A second turn reuses the prefix, image included.
    _send(qtbot, tab, "And now?")
    last = window.store.messages(tab.chat_id)[-1].stats
    block = engine.prefix_cache.block_size
    assert last["cached_tokens"] >= first_prompt // block * block > 0


def test_images_pasted_and_dropped_are_attached(qtbot, smolvlm, db, tmp_path):
    _png(tmp_path / "green.png", (20, 200, 30))
    window = open_window(qtbot, smolvlm, db)
    tab = window.current_tab()
    bar = tab.attachment_bar

    QGuiApplication.clipboard().setImage(QImage(32, 20, QImage.Format_RGB32))
    tab.composer.setFocus()
    tab.composer.paste()  # Ctrl+V with a screenshot
    qtbot.waitUntil(lambda: len(bar.images) == 1 and bar.pending == 0, timeout=30_000)
    assert bar.images[0].name == "pasted image.png" and bar.images[0].width == 32
    assert tab.composer.toPlainText() == ""  # nothing typed in

    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(tmp_path / "green.png"))])
    drop = QDropEvent(QPointF(10, 10), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    tab.dropEvent(drop)  # Qt delivers a drop only inside a real drag: its handler, directly
    assert drop.isAccepted()
    qtbot.waitUntil(lambda: len(bar.images) == 2 and bar.pending == 0, timeout=30_000)
    assert bar.images[1].name == "green.png"

    # ✕ removes one.
    bar.remove(bar.images[0])
    assert [i.name for i in bar.images] == ["green.png"]


def test_a_damaged_image_is_refused_saying_why(qtbot, smolvlm, db, tmp_path, monkeypatch):
    data = _png(tmp_path / "whole.png", (1, 2, 3), (300, 200))
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])
    window = open_window(qtbot, smolvlm, db)
    tab = window.current_tab()
    monkeypatch.setattr(QFileDialog, "getOpenFileNames",
                        staticmethod(lambda *a, **k: ([str(tmp_path / "cut.png")], "")))
    qtbot.mouseClick(tab.attach_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: tab.attachment_bar.pending == 0 and "cut.png" in
                    tab.footer.text(), timeout=30_000)
    assert "was not attached" in tab.footer.text() and "damaged or cut short" in \
        tab.footer.text()
    assert not tab.attachment_bar.images


def test_a_text_model_says_before_sending_that_it_cannot_read_images(qtbot, tiny_model_dir,
                                                                     db, tmp_path,
                                                                     monkeypatch):
    _png(tmp_path / "red.png", (200, 30, 30))
    window = open_window(qtbot, tiny_model_dir, db)
    tab = window.current_tab()
    _attach_by_button(qtbot, tab, monkeypatch, tmp_path / "red.png")
    assert "cannot read images" in tab.footer.text()
    tab.composer.setPlainText("What is it?")
    qtbot.mouseClick(tab.send_button, Qt.LeftButton)
    assert "cannot read images" in tab.footer.text() and not tab.is_streaming
    assert tab.composer.toPlainText() == "What is it?" and len(tab.attachment_bar.images) == 1
    assert window.store.messages(tab.chat_id) == []  # nothing sent, nothing stored


def test_a_chat_with_images_survives_a_restart_an_edit_and_export_import(
        qtbot, smolvlm, tiny_model_dir, tmp_path, monkeypatch):
    from app.chat.chat_files import import_file, write_export

    red = _png(tmp_path / "red.png", (200, 30, 30))
    path = tmp_path / "chats.db"
    window = open_window(qtbot, smolvlm, path)
    tab = window.current_tab()
    _greedy(tab, 3)
    _attach_by_button(qtbot, tab, monkeypatch, tmp_path / "red.png")
    digest = tab.attachment_bar.images[0].digest
    _send(qtbot, tab, "Look")
    chat_id = tab.chat_id
    exported = write_export(window.store, chat_id, tmp_path / "chat.json")
    window.close()

    # Reopened: the thumbnail is shown again, and Edit puts the image back.
    window = open_window(qtbot, smolvlm, path)
    tab = window.open_chat(chat_id)
    assert [r["digest"] for r in tab.transcript.images] == [digest]
    tab._on_action("edit", 0)
    bar = tab.attachment_bar
    assert [i.digest for i in bar.images] == [digest] and bar.images[0].thumb
    assert bar.images[0].size == len(red)
    _send(qtbot, tab, "Look again")  # sent as a new version, its image read from the store
    assert window.store.messages(tab.chat_id)[0].stats["images"][0]["digest"] == digest
    assert tab.conversation.messages[-1]["role"] == "assistant"

    # Export / import: the image travels in the file, and is the same image.
    doc = json.loads(exported.read_text(encoding="utf-8"))
    assert [i["digest"] for i in doc["images"]] == [digest]
    new_id = import_file(window, exported)
    assert new_id is not None and new_id != chat_id
    imported = window.store.messages(new_id)[0]
    assert imported.stats["images"][0]["digest"] == digest
    # Deleting one chat keeps the image the other still has; deleting both forgets it.
    window.sidebar.delete(chat_id)
    assert window.store.image_data(digest) == red
    window.sidebar.delete(new_id)
    assert window.store.image_data(digest) is None


def test_a_chat_with_images_goes_on_with_a_text_model(qtbot, smolvlm, tiny_model_dir,
                                                      tmp_path, monkeypatch):
    """An earlier image is named in words for a model that reads none."""
    _png(tmp_path / "red.png", (200, 30, 30))
    path = tmp_path / "chats.db"
    window = open_window(qtbot, smolvlm, path)
    tab = window.current_tab()
    _greedy(tab, 3)
    _attach_by_button(qtbot, tab, monkeypatch, tmp_path / "red.png")
    _send(qtbot, tab, "Look")
    chat_id = tab.chat_id
    window.close()
    window = open_window(qtbot, tiny_model_dir, path)
    tab = window.open_chat(chat_id)
    prompt = tab.prompt_messages()
    assert "images" not in prompt[0] and prompt[0]["content"].startswith("[image: red.png]")
    _greedy(tab, 3)
    _send(qtbot, tab, "And?")
    assert tab.conversation.messages[-1]["role"] == "assistant"
    assert not tab.conversation.messages[-1].get("interrupted")


def test_an_interrupted_answer_about_an_image_continues(qtbot, qwen_vl, tmp_path):
    """Continue on a stopped answer in a chat with an image: the engine reads
    the image again and writes on from the answer's text."""
    from app.conversation.chat_images import read_image_bytes
    from app.store.chats import ChatStore

    path = tmp_path / "chats.db"
    red = read_image_bytes("red.png", _png(tmp_path / "red.png", (200, 30, 30)))
    store = ChatStore(str(path))
    chat = store.create_chat("stopped")
    store.add_message(chat.id, "user", "What is it?", stats={"images": [red.record()]},
                      images=[red])
    store.add_message(chat.id, "assistant", "The picture", complete=False)
    store.close()
    window = open_window(qtbot, qwen_vl, path)
    tab = window.open_chat(chat.id)
    assert tab.conversation.messages[-1].get("interrupted")
    _greedy(tab, 4)
    tab._on_action("continue", 1)
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=120_000)
    answer = tab.conversation.messages[-1]
    assert answer["role"] == "assistant" and not answer.get("interrupted")
    assert answer["content"].startswith("The picture") and len(answer["content"]) > 11
    stored = window.store.messages(chat.id)
    assert len(stored) == 2 and stored[-1].content == answer["content"]
