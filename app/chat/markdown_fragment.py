"""Markdown rendered inert, one message at a time, for the transcript
(app/chat/transcript.py): a fragment parsed in a document of its own (so an
unclosed fence in one message cannot reshape another), GitHub's dialect
with raw HTML shown as text, no resource ever loaded, an image shown as its
address; and where a streaming answer's finished paragraphs end.
"""

from __future__ import annotations

import json

from PySide6.QtGui import (QTextBlockFormat, QTextCharFormat, QTextCursor, QTextDocument,
                           QTextDocumentFragment)

MARKDOWN = QTextDocument.MarkdownDialectGitHub | QTextDocument.MarkdownNoHTML


class InertDocument(QTextDocument):
    """A document that loads nothing an image or a link points at."""

    def loadResource(self, kind, name):  # noqa: N802 (Qt naming)
        return None


def fragment(markdown: str) -> QTextDocumentFragment:
    document = InertDocument()
    document.setMarkdown(markdown, MARKDOWN)
    _replace_images(document)
    return QTextDocumentFragment(document)


def json_block(text: str) -> str:
    """A JSON answer, formatted, in a code block (as written when it does not
    parse: cut by max_tokens, say)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    pretty = json.dumps(value, indent=2, ensure_ascii=False)
    fence = "~~~~" if "```" in pretty else "```"
    return f"{fence}json\n{pretty}\n{fence}"


def paragraph_format() -> QTextBlockFormat:
    """A block spaced like a Markdown paragraph (the fragment's first block
    takes the format of the block it is inserted into)."""
    fmt = QTextBlockFormat()
    fmt.setTopMargin(6)
    fmt.setBottomMargin(6)
    return fmt


def paragraph_break(text: str, start: int) -> int:
    """The end of the last blank line after `start` that is outside a code
    fence (start itself when there is none); `start` is outside any fence."""
    best, inside, fence, position = start, False, "", start
    lines = text[start:].split("\n")
    for number, line in enumerate(lines[:-1]):  # the last line may be half written
        position += len(line) + 1
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")) and (not inside or stripped.startswith(fence)):
            inside, fence = not inside, stripped[:3]
        elif not stripped and not inside and number > 0:
            best = position
    return best


def _replace_images(document: QTextDocument) -> None:
    """Show each image as its address in text: Qt's image handler would read a
    local file itself, whatever loadResource says."""
    images, block = [], document.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            part = it.fragment()
            if part.charFormat().isImageFormat():
                images.append((part.position(), part.length(),
                               part.charFormat().toImageFormat().name()))
            it += 1
        block = block.next()
    cursor = QTextCursor(document)
    for position, length, name in reversed(images):
        cursor.setPosition(position)
        cursor.setPosition(position + length, QTextCursor.KeepAnchor)
        cursor.insertText(f"[image: {name}]", QTextCharFormat())
