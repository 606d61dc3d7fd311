"""View > Tint accepted drafts (issue 32): the text of an answer's tokens that
were proposed ahead and verified (Token.drafted) gets a faint background,
so a person sees where drafts paid. Off by default; kept in the settings.

The transcript renders Markdown, so the pieces are found again in the
rendered text, in order, from the message's start: a piece whose markup
the renderer changed (emphasis markers, a code fence) is not tinted. A
newline inside a piece splits it (paragraphs become blocks)."""

from __future__ import annotations

from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor, QTextDocument

SETTING = "tint_drafts"


def colour(dark: bool) -> QColor:
    """A background that reads as a tint on either theme."""
    return QColor(80, 160, 255, 70) if dark else QColor(40, 120, 255, 45)


def tint(document: QTextDocument, start: int, end: int, pieces: list[str],
         background: QColor) -> int:
    """Tint each of `pieces` where it next occurs in `document` between
    `start` and `end`; returns how many were found."""
    if not pieces or end <= start:
        return 0
    cursor = QTextCursor(document)
    cursor.setPosition(start)
    cursor.setPosition(end, QTextCursor.KeepAnchor)
    text = cursor.selectedText()  # one character per document position
    fmt = QTextCharFormat()
    fmt.setBackground(background)
    at = found = 0
    for piece in pieces:
        for part in piece.split("\n"):
            if not part.strip():
                continue
            i = text.find(part, at)
            if i < 0:
                continue  # not rendered as written (markup)
            mark = QTextCursor(document)
            mark.setPosition(start + i)
            mark.setPosition(start + i + len(part), QTextCursor.KeepAnchor)
            mark.mergeCharFormat(fmt)
            at, found = i + len(part), found + 1
    return found
