"""Files attached to a message: read as text (text, code, Markdown; a PDF's
text layer), sized and put into the message the model sees.

Qt-free, and run off the GUI thread (a PDF takes a while). A file that cannot
be attached says why in `Attachment.error`: too large, not text, a PDF with
no text layer or a password. In the message a file is a block after the
user's own words; `split_message` finds them again (edit, display).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

MAX_TEXT_BYTES = 4 << 20  # a text file larger than this is refused, and a PDF's text too
MAX_PDF_BYTES = 64 << 20
# pypdf inflates each stream whole before reading it, up to 75 MB by default,
# so a 0.2 MiB file could ask for that much memory and minutes of parsing. A
# page of text is a few KiB of content; a stream past twice the text a file
# may give is not one worth reading.
MAX_PDF_STREAM = 2 * MAX_TEXT_BYTES
PDF_STREAM_LIMITS = ("zlib_maximum_output_length", "lzw_maximum_output_length",
                     "run_length_maximum_output_length", "brotli_maximum_output_length",
                     "array_based_stream_maximum_output_length",
                     "maximum_declared_stream_length", "stream_decoding_work_maximum_length")
SIZE_LIMIT = 1 << 53  # sizes and counts past this are not real (nor exact as floats)
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


class _TooMuchText(Exception):
    """Raised from pypdf's text visitor: stops a page mid-way once the file's
    text is over the limit (one page can expand to gigabytes: a form drawn
    thousands of times, a font mapping each code to a long string)."""


def _pdf(path: Path, name: str, size: int) -> Attachment:
    too_much = Attachment(name, size, error=f"The PDF's text is over {MAX_TEXT_BYTES / 2**20:g} "
                                            "MiB; files up to that much text can be attached.")
    from pypdf import PdfReader  # here: pypdf takes a while to import
    from pypdf.errors import LimitReachedError

    try:
        with _stream_limits():
            reader = PdfReader(str(path))
            if reader.is_encrypted:
                return Attachment(name, size, error="The PDF is protected by a password.")
            pages, total = [], 0  # UTF-8 bytes of the pages kept so far
            for page in reader.pages:
                seen = total

                def count(text, *_):
                    nonlocal seen
                    seen += len(text)  # characters: never more than the UTF-8 bytes
                    if seen > MAX_TEXT_BYTES:
                        raise _TooMuchText

                # A broken string can decode to lone surrogates, which no
                # tokenizer or database takes: they become '?' here.
                data = (page.extract_text(visitor_text=count) or "").strip().encode(
                    "utf-8", "replace")
                total += len(data) + 2 if data else 0  # and the "\n\n" between pages
                if total > MAX_TEXT_BYTES:
                    return too_much
                pages.append(data.decode("utf-8"))
    except _TooMuchText:
        return too_much
    except LimitReachedError as e:
        return Attachment(name, size, error=f"Part of the PDF expands to over "
                                            f"{MAX_PDF_STREAM >> 20} MiB when decompressed "
                                            f"({str(e)[:80]}); it is not read.")
    except Exception as e:  # pypdf on a hostile file raises many kinds
        return Attachment(name, size, error=f"The PDF could not be read ({str(e)[:120]}).")
    text = "\n\n".join(p for p in pages if p)
    if not text.strip():
        return Attachment(name, size, error="The PDF has no text layer (a scan?): nothing "
                                            "to read.")
    return Attachment(name, size, text=text)


def _stream_limits():
    """pypdf's decompression bounds lowered to MAX_PDF_STREAM for this thread
    (its configuration is a context variable); a pypdf without that API (before
    7) keeps its own, and the text is still bounded page by page."""
    try:
        from pypdf import apply_configuration, get_configuration
    except ImportError:
        return contextlib.nullcontext()
    current = get_configuration()
    return apply_configuration(**{key: MAX_PDF_STREAM for key in PDF_STREAM_LIMITS
                                  if hasattr(current, key)})


def count_of(value) -> int | None:
    """A size or token count from a record, or None if it is not one (a
    database written by an older import may hold any number)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < SIZE_LIMIT
    return value if ok else None


def file_record(raw, length: int) -> dict | None:
    """`raw` as a file record of a message `length` characters long ({name,
    size, tokens, start, end}), or None if it is not one: every number a
    count, the block inside the message."""
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        return None
    size, start, end = (count_of(raw.get(k)) for k in ("size", "start", "end"))
    tokens = raw.get("tokens")
    if size is None or start is None or end is None or not start <= end <= length or \
            (tokens is not None and count_of(tokens) is None):
        return None
    return {"name": raw["name"][:255], "size": size, "tokens": tokens, "start": start,
            "end": end}


def split_message(content: str, files: list[dict]) -> tuple[str, list[Attachment]]:
    """The user's own words and the attached files, from a stored message and
    its `attachments` record ({name, size, tokens, start, end} per file)."""
    if not files:
        return content, []
    spans = [(count_of(f.get("start")), count_of(f.get("end"))) for f in files]
    first = min((start for start, _ in spans if start is not None), default=len(content))
    attached = []
    for f, (start, end) in zip(files, spans):
        block = content[start or 0:end or 0]
        head = OPEN.format(name=json.dumps(f.get("name", ""), ensure_ascii=False))
        text = block[len(head):len(block) - len(CLOSE)] if block.startswith(head) else block
        attached.append(Attachment(str(f.get("name", "file")), count_of(f.get("size")) or 0,
                                   text, count_of(f.get("tokens"))))
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
    return describe(Attachment(str(record.get("name", "file")),
                               count_of(record.get("size")) or 0,
                               tokens=count_of(record.get("tokens")))).replace(" · counting…", "")


def describe(f: Attachment) -> str:
    """'notes.md · 12.3 KiB · ~3,100 tokens'."""
    size = f"{f.size / 1024:.1f} KiB" if f.size < 1 << 20 else f"{f.size / 2**20:.1f} MiB"
    tokens = f" · ~{f.tokens:,} tokens" if f.tokens is not None else " · counting…"
    return f"{f.name} · {size}" + ("" if f.error else tokens)
