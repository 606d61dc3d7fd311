"""Text from outside (a model's words, a tool server's results) for a
terminal: control characters (an escape sequence could move the cursor,
retitle the window or rewrite what was shown) printed as \\xNN, tabs and
newlines kept. No Qt: the command line uses it."""

from __future__ import annotations

_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0))
             if c not in (0x09, 0x0A)}


def terminal_text(text: str) -> str:
    return text.translate(_CONTROLS)
