"""Files into a chat: text, code, Markdown and a PDF's text attached, their
size and token cost shown before sending, the words shown and the whole file
sent, over-context refused clearly, broken files refused with the reason."""

import zlib

from PySide6.QtCore import QMimeData, QUrl
from PySide6.QtWidgets import QLabel

from app.conversation import attach_files
from app.conversation.attach_files import join_message, read_attachment, split_message


def _pdf(path, text: str | None, *, stream: bytes | None = None, pages: int = 1):
    """A PDF with `text` on each of its `pages` (None: a page with no text
    layer); `stream`: the pages share this Flate-compressed content instead."""
    content = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode() if text else b""
    flate = b" /Filter /FlateDecode" if stream is not None else b""
    data = stream if stream is not None else content
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
                   b" ".join(b"%d 0 R" % (6 + i) for i in range(pages)), pages),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
               b"<< /Length %d%s >>\nstream\n" % (len(data), flate) + data + b"\nendstream",
               b"<< /Font << /F1 3 0 R >> >>"]
    objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
                b"/Resources 5 0 R >>"] * pages
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)
    path.write_bytes(bytes(out))
    return path


def _deflate(chunk: bytes, times: int) -> bytes:
    """`chunk` repeated `times` times, zlib-compressed (without holding it whole)."""
    z = zlib.compressobj(9)
    return b"".join(z.compress(chunk) for _ in range(times)) + z.flush()


def _flate_bomb(path):
    """0.1 MiB on disk, 80 MiB of zeros once inflated: past pypdf's own 75 MB limit."""
    return _pdf(path, None, stream=_deflate(bytes(1 << 20), 80))


def _text_bomb(path, pages: int = 12):
    """A few KiB on disk; each page shares one content stream of 0.5 MiB of
    text, so the file's text is `pages` / 2 MiB."""
    line = b"BT /F1 12 Tf 72 720 Td (" + b"the quick brown fox jumps over the lazy dog " * 64 + \
        b") Tj ET\n"
    return _pdf(path, None, stream=_deflate(line, (1 << 19) // (len(line) - 30)), pages=pages)


def test_text_code_and_pdf_are_read_and_the_rest_refused(tmp_path, monkeypatch):
    (tmp_path / "notes.md").write_text("# Notes\n\ncafé ☕\r\nline two\n", encoding="utf-8")
    f = read_attachment(tmp_path / "notes.md")
    assert f.error is None and f.text == "# Notes\n\ncafé ☕\nline two\n" and f.size > 0
    (tmp_path / "bom.py").write_bytes(b"\xef\xbb\xbfprint(1)\n")
    assert read_attachment(tmp_path / "bom.py").text == "print(1)\n"
    (tmp_path / "wide.txt").write_bytes("hello".encode("utf-16"))
    assert read_attachment(tmp_path / "wide.txt").text == "hello"
    assert read_attachment(_pdf(tmp_path / "doc.pdf", "Hello from a PDF")).text.strip() == \
        "Hello from a PDF"
    (tmp_path / "app.bin").write_bytes(b"\x7fELF\0\0\0binary")
    assert "not a text file" in read_attachment(tmp_path / "app.bin").error
    (tmp_path / "latin.txt").write_bytes("caf\xe9".encode("latin-1"))
    assert "not UTF-8" in read_attachment(tmp_path / "latin.txt").error
    assert "no text layer" in read_attachment(_pdf(tmp_path / "scan.pdf", None)).error
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4\nthis is not a pdf")
    assert "could not be read" in read_attachment(tmp_path / "broken.pdf").error
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(str(tmp_path / "doc.pdf")))
    writer.encrypt("secret")
    with open(tmp_path / "locked.pdf", "wb") as out:
        writer.write(out)
    assert "password" in read_attachment(tmp_path / "locked.pdf").error
    assert "could not be read" in read_attachment(tmp_path / "missing.txt").error
    monkeypatch.setattr(attach_files, "MAX_TEXT_BYTES", 10)
    assert "files up to" in read_attachment(tmp_path / "notes.md").error


def test_a_message_with_files_splits_back_into_words_and_files(tmp_path):
    a = read_attachment(_write(tmp_path / 'odd "name".txt', "first file"))
    b = read_attachment(_write(tmp_path / "b.md", "second </file> file"))
    content, record = join_message("Compare these", [a, b])
    assert content.startswith("Compare these\n\n<file name=") and "first file" in content
    words, files = split_message(content, record)
    assert words == "Compare these" and [f.text for f in files] == ["first file",
                                                                    "second </file> file"]
    assert [f.name for f in files] == ['odd "name".txt', "b.md"]


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_attach_send_edit_and_the_context_limit_in_the_window(qtbot, window, tmp_path):
    tab = window.chat_tabs()[0]
    notes = _write(tmp_path / "notes.txt", "the quick brown fox jumps over the lazy dog")
    tab.attach_requested.emit([str(notes), str(tmp_path / "missing.txt")])
    qtbot.waitUntil(lambda: tab.attachment_bar.pending == 0, timeout=10_000)
    (f,) = tab.attachment_bar.files
    assert f.tokens == len(window.engine.tokenizer.encode(f.block()))
    assert "missing.txt was not attached" in tab.footer.text()
    assert not tab.attachment_bar.isHidden()
    shown = " ".join(w.text() for w in tab.attachment_bar.findChildren(QLabel))
    assert "notes.txt" in shown and f"~{f.tokens:,} tokens" in shown
    queued = []
    window.engine.subscribe(lambda e: queued.append(e) if type(e).__name__ == "Queued" else None)
    tab.composer.setPlainText("What does it say?")
    tab.send()
    assert tab.attachment_bar.isHidden() and tab.attachment_bar.files == []
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)
    sent = window.engine.render([{"role": "user", "content": tab.conversation.messages[0]["content"]}])
    assert queued[-1].prompt_tokens == len(sent) > f.tokens  # the model read the file
    text = tab.transcript.toPlainText()
    assert "What does it say?" in text and "File: notes.txt" in text
    assert "lazy dog" not in text  # the file is a line, not its text
    stored = window.store.messages(tab.chat_id)[0]
    assert stored.stats["attachments"][0]["name"] == "notes.txt"
    # Edit: the words in the composer, the file attached again.
    tab.edit_message(0)
    assert tab.composer.toPlainText() == "What does it say?"
    assert [x.text for x in tab.attachment_bar.files] == [f.text]
    tab.cancel_edit()
    assert tab.attachment_bar.files == []
    # A file larger than what is left of the context (512 tokens): refused, said.
    big = _write(tmp_path / "big.txt", "the quick brown fox jumps over the lazy dog " * 200)
    tab.attach_requested.emit([str(big)])
    qtbot.waitUntil(lambda: tab.attachment_bar.pending == 0, timeout=10_000)
    assert tab.attachment_bar.over and "Remove a file" in tab.footer.text()
    tab.composer.setPlainText("and this?")
    tab.send()
    assert not tab.is_streaming and tab.composer.toPlainText() == "and this?"
    assert len(tab.conversation.messages) == 2  # nothing sent
    tab.attachment_bar.remove(tab.attachment_bar.files[0])
    assert not tab.attachment_bar.over and tab.attachment_bar.isHidden()


def test_dropped_files_are_attached_not_typed(qtbot, tmp_path):
    from app.chat.chat_tab import ChatTab

    tab = ChatTab()
    qtbot.addWidget(tab)
    asked = []
    tab.attach_requested.connect(asked.append)
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(tmp_path / "a.md"))])
    assert tab.composer.canInsertFromMimeData(mime)
    tab.composer.insertFromMimeData(mime)
    assert asked == [[str(tmp_path / "a.md")]] and tab.composer.toPlainText() == ""
    text = QMimeData()
    text.setText("just words")
    tab.composer.insertFromMimeData(text)
    assert tab.composer.toPlainText() == "just words"


def test_a_file_name_that_looks_like_html_is_shown_as_text(qtbot):
    """A name is text: Qt would render '<img src=...>' in a label or tooltip."""
    from PySide6.QtCore import Qt

    from app.conversation.attach_files import Attachment
    from app.chat.chat_tab import ChatTab

    tab = ChatTab()
    qtbot.addWidget(tab)
    hostile = '<img src="/etc/passwd"><b>bold</b>.txt'
    tab.attachment_bar.add(Attachment(hostile, 10, "x", 3))
    (label,) = [w for w in tab.attachment_bar.findChildren(QLabel) if hostile in w.text()]
    assert label.textFormat() == Qt.PlainText
    assert "&lt;img" in label.toolTip()  # the tooltip shows the characters
    tab.attached(Attachment(hostile, 0, error="It is not a file."))
    assert tab.footer.textFormat() == Qt.PlainText and hostile in tab.footer.text()


def test_a_flate_bomb_is_refused_with_the_reason(tmp_path):
    """Issue 30 (8): pypdf's LimitReachedError escaped and killed the reader."""
    bomb = _flate_bomb(tmp_path / "bomb.pdf")
    assert bomb.stat().st_size < 256 << 10
    f = read_attachment(bomb)
    assert f.text == "" and "expands to over 8 MiB when decompressed" in f.error


def test_the_loader_sends_loaded_whatever_happens(qtbot, tmp_path, monkeypatch):
    """Issue 30 (8): a reader that raised never sent `loaded`, so the tab kept
    waiting for the file and could not send again."""
    from app.chat import attachment_bar
    from app.chat.attachment_bar import AttachmentLoader

    loader = AttachmentLoader()
    counted = []
    with qtbot.waitSignal(loader.loaded, timeout=20_000) as got:
        loader.load("bomb", _flate_bomb(tmp_path / "bomb.pdf"), counted.append)
    key, f = got.args
    assert key == "bomb" and "decompressed" in f.error and counted == []

    def broken(path):
        raise RuntimeError("a bug in the reader")

    monkeypatch.setattr(attachment_bar, "read_attachment", broken)
    with qtbot.waitSignal(loader.loaded, timeout=20_000) as got:
        loader.load("bug", tmp_path / "notes.txt", counted.append)
    key, f = got.args
    assert key == "bug" and f.name == "notes.txt" and "a bug in the reader" in f.error


def test_a_tab_stays_usable_after_a_file_that_breaks_the_reader(qtbot, window, tmp_path):
    tab = window.chat_tabs()[0]
    tab.attach_requested.emit([str(_flate_bomb(tmp_path / "bomb.pdf"))])
    qtbot.waitUntil(lambda: tab.attachment_bar.pending == 0, timeout=20_000)
    assert "bomb.pdf was not attached" in tab.footer.text() and tab.attachment_bar.files == []
    tab.composer.setPlainText("still here?")
    tab.send()
    assert len(tab.conversation.messages) == 1  # sent, not "Still reading the attached files…"
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=60_000)


def test_a_pdf_whose_text_expands_is_refused_while_it_is_read(qtbot, tmp_path, monkeypatch):
    """Issue 30 (9): a few KiB of PDF gave 73 MB of text, all read and then
    tokenized before the context check. The text is bounded like a text
    file's, page by page, and nothing past the bound is read or counted."""
    from pypdf import PageObject

    read, stopped = [], []
    extract = PageObject.extract_text

    def spy(page, *args, **kwargs):
        read.append(page)
        try:
            return extract(page, *args, **kwargs)
        except Exception as e:
            stopped.append(type(e).__name__)
            raise

    monkeypatch.setattr(PageObject, "extract_text", spy)
    bomb = _text_bomb(tmp_path / "expands.pdf")
    assert bomb.stat().st_size < 16 << 10
    f = read_attachment(bomb)
    assert f.text == "" and f.error == ("The PDF's text is over 4 MiB; files up to that much "
                                        "text can be attached.")
    assert len(read) == 9  # 8 pages are under 4 MiB, the 9th goes over: 3 are never read
    # Within a page too: with a bound of 64 KiB the first page (0.5 MiB) is
    # stopped part-way, not read whole and then measured.
    monkeypatch.setattr(attach_files, "MAX_TEXT_BYTES", 64 << 10)
    read.clear()
    stopped.clear()
    assert "text is over 0.0625 MiB" in read_attachment(bomb).error
    assert len(read) == 1 and stopped == ["_TooMuchText"]
    # Nor is it counted with the tokenizer.
    from app.chat.attachment_bar import AttachmentLoader

    loader, counted = AttachmentLoader(), []
    with qtbot.waitSignal(loader.loaded, timeout=20_000) as got:
        loader.load("expands", bomb, counted.append)
    assert "text is over" in got.args[1].error and counted == []
