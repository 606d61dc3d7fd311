"""Text from outside (a model's words, a tool server's results) for a
terminal: control characters (an escape sequence could move the cursor,
retitle the window or rewrite what was shown) printed as \\xNN, bidi and
zero-width characters as \\uNNNN, tabs and newlines kept. No Qt: the
command line uses it, and the app's tool blocks and approvals."""

from __future__ import annotations

_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0))
             if c not in (0x09, 0x0A)}
# Bidi overrides and isolates, zero-width characters: they could make text
# read as something else (an argument shown reversed, a name hiding a part).
# (Joiners U+200C/U+200D stay: scripts and emoji need them.)
_CONTROLS |= {c: f"\\u{c:04x}" for c in (0x200B, 0x200E, 0x200F, *range(0x202A, 0x202F),
                                          *range(0x2066, 0x206A), 0xFEFF)}


def terminal_text(text: str) -> str:
    return text.translate(_CONTROLS)
