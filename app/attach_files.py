"""Files attached to a message: read as text (text, code, Markdown; a PDF's
text layer), sized and put into the message the model sees.

Qt-free, and run off the GUI thread (a PDF takes a while). A file that cannot
be attached says why in `Attachment.error`: too large, not text, a PDF with
no text layer or a password. In the message a file is a block after the
user's own words; `split_message` finds them again (edit, display).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

MAX_TEXT_BYTES = 4 << 20  # a text file larger than this is refused
MAX_PDF_BYTES = 64 << 20
OPEN = "\n\n<file name={name}>\n"
CLOSE = "\n</file>"


@dataclass
class Attachment:
    name: str
    size: int  # bytes on disk
    text: str = ""
    tokens: int | None = None  # once counted with the model's tokenizer
    error: str | None = None  # why it cannot be attached

    def block(self) -> str:
        """The file as the model reads it, after the user's words."""
        return OPEN.format(name=json.dumps(self.name, ensure_ascii=False)) + self.text + CLOSE


def read_attachment(path: str | Path) -> Attachment:
    path = Path(path)
    name = path.name
    try:
        size = path.stat().st_size
        if not path.is_file():
            return Attachment(name, 0, error="It is not a file.")
        pdf = path.suffix.lower() == ".pdf"
        limit = MAX_PDF_BYTES if pdf else MAX_TEXT_BYTES
        if size > limit:
            return Attachment(name, size, error=f"It is {size / 2**20:.1f} MiB; files up to "
                                                f"{limit >> 20} MiB can be attached.")
        with open(path, "rb") as f:
            head = f.read(5)
        if pdf or head == b"%PDF-":
            return _pdf(path, name, size)
        data = path.read_bytes()
    except OSError as e:
        return Attachment(name, 0, error=f"It could not be read ({e.strerror}).")
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):  # UTF-16 with its byte-order mark
        try:
            return Attachment(name, size, text=data.decode("utf-16").replace("\r\n", "\n"))
        except UnicodeDecodeError:
            return Attachment(name, size, error="It is not valid UTF-16 text.")
    if b"\0" in data[:8192]:
        return Attachment(name, size, error="It is not a text file (text, code, Markdown or "
                                            "PDF can be attached).")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return Attachment(name, size, error="It is not UTF-8 text.")
    return Attachment(name, size, text=text.replace("\r\n", "\n"))


def _pdf(path: Path, name: str, size: int) -> Attachment:
    try:
        from pypdf import PdfReader
        from pypdf.errors import PdfReadError

        reader = PdfReader(str(path))
        if reader.is_encrypted:
            return Attachment(name, size, error="The PDF is protected by a password.")
        pages = [(page.extract_text() or "").strip() for page in reader.pages]
    except (PdfReadError, OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        return Attachment(name, size, error=f"The PDF could not be read ({str(e)[:120]}).")
    text = "\n\n".join(p for p in pages if p)
    if not text.strip():
        return Attachment(name, size, error="The PDF has no text layer (a scan?): nothing "
                                            "to read.")
    return Attachment(name, size, text=text)


def split_message(content: str, files: list[dict]) -> tuple[str, list[Attachment]]:
    """The user's own words and the attached files, from a stored message and
    its `attachments` record ({name, size, tokens, start, end} per file)."""
    if not files:
        return content, []
    first = min(f.get("start", len(content)) for f in files)
    attached = []
    for f in files:
        start, end = f.get("start", 0), f.get("end", 0)
        block = content[start:end]
        head = OPEN.format(name=json.dumps(f.get("name", ""), ensure_ascii=False))
        text = block[len(head):len(block) - len(CLOSE)] if block.startswith(head) else block
        attached.append(Attachment(str(f.get("name", "file")), int(f.get("size", 0)), text,
                                   f.get("tokens")))
    return content[:first], attached


def join_message(text: str, files: list[Attachment]) -> tuple[str, list[dict]]:
    """The message the model reads (words, then each file's block) and the
    record of where each file is in it."""
    content, record = text, []
    for f in files:
        block = f.block()
        record.append({"name": f.name, "size": f.size, "tokens": f.tokens,
                       "start": len(content), "end": len(content) + len(block)})
        content += block
    return content, record


def describe_record(record: dict) -> str:
    """describe() of a stored message's file record."""
    tokens = record.get("tokens")
    return describe(Attachment(str(record.get("name", "file")), int(record.get("size") or 0),
                               tokens=tokens if isinstance(tokens, int) else None)).replace(
        " · counting…", "")


def describe(f: Attachment) -> str:
    """'notes.md · 12.3 KiB · ~3,100 tokens'."""
    size = f"{f.size / 1024:.1f} KiB" if f.size < 1 << 20 else f"{f.size / 2**20:.1f} MiB"
    tokens = f" · ~{f.tokens:,} tokens" if f.tokens is not None else " · counting…"
    return f"{f.name} · {size}" + ("" if f.error else tokens)
