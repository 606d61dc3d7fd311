"""Syntax colours for fenced code blocks in the transcript (pygments lexers on
Qt's own Markdown document: code blocks carry their fence language)."""

from __future__ import annotations

from functools import lru_cache

from PySide6.QtGui import QColor, QFont, QSyntaxHighlighter, QTextCharFormat, QTextFormat
from pygments.lexers import get_lexer_by_name
from pygments.token import Comment, Keyword, Name, Number, Operator, String
from pygments.util import ClassNotFound

_DARK = [  # (token type, colour, bold) on a dark background (GitHub's dark set)
    (Comment, "#8b949e", False),
    (Keyword, "#ff7b72", True),
    (String, "#a5d6ff", False),
    (Number, "#79c0ff", False),
    (Name.Function, "#d2a8ff", False),
    (Name.Class, "#d2a8ff", True),
    (Name.Builtin, "#79c0ff", False),
    (Operator, "#ff7b72", False),
]
_STYLE = [  # (token type, colour, bold)
    (Comment, "#6a737d", False),
    (Keyword, "#d73a49", True),
    (String, "#22863a", False),
    (Number, "#005cc5", False),
    (Name.Function, "#6f42c1", False),
    (Name.Class, "#6f42c1", True),
    (Name.Builtin, "#005cc5", False),
    (Operator, "#d73a49", False),
]


@lru_cache(maxsize=32)
def _lexer(language: str):
    try:
        return get_lexer_by_name(language, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return None


def _format(color: str, bold: bool) -> QTextCharFormat:
    fmt = QTextCharFormat()
    fmt.setForeground(QColor(color))
    if bold:
        fmt.setFontWeight(QFont.Bold)
    return fmt


class CodeHighlighter(QSyntaxHighlighter):
    """Colours each line of a fenced code block by its language."""

    def __init__(self, document):
        super().__init__(document)
        self._dark = None
        self._formats = []

    def _style(self) -> None:
        from app.ui.theme import is_dark

        dark = is_dark()
        if dark != self._dark:  # the app's theme decides (set before a re-render)
            self._dark = dark
            self._formats = [(token, _format(color, bold))
                             for token, color, bold in (_DARK if dark else _STYLE)]

    def format_for(self, token_type) -> QTextCharFormat | None:
        self._style()
        for token, fmt in self._formats:
            if token_type in token:
                return fmt
        return None

    def highlightBlock(self, text: str) -> None:  # noqa: N802
        fmt = self.currentBlock().blockFormat()
        if not fmt.hasProperty(QTextFormat.BlockCodeFence):
            return
        lexer = _lexer(fmt.stringProperty(QTextFormat.BlockCodeLanguage) or "text")
        if lexer is None:
            return
        position = 0
        for token_type, value in lexer.get_tokens(text):
            char_format = self.format_for(token_type)
            if char_format is not None:
                self.setFormat(position, len(value), char_format)
            position += len(value)
