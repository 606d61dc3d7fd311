"""A tool call in the transcript: the tool and its server, the arguments
the model wrote, then the result (folded when long: "Show all" opens it).
A part of Transcript (app/chat/transcript.py), kept apart for size.

Everything here is outside text (a model's arguments, a server's names and
results): it is inserted as plain text, never Markdown or HTML, with control
characters shown as \\xNN (app/ui/terminal.py), so a result cannot draw
links, images or the app's own actions, nor reshape the transcript."""

from __future__ import annotations

import json

from PySide6.QtGui import QFontDatabase, QTextBlockFormat, QTextCharFormat, QTextCursor

from app.ui.terminal import terminal_text

FOLD_LINES, FOLD_CHARS = 12, 1_500  # a result longer than this shows folded
SHOWN_ARGS = 4_000  # characters of arguments shown (the call has them all)
STATUS = {"asking": "waiting for your approval", "running": "running…", "result": "",
          "error": "error", "denied": "denied", "stopped": "stopped", "refused": "not run"}


def render(view, cursor: QTextCursor, index: int, message: dict,
           actions: list[tuple[str, str]]) -> None:
    call = message.get("tool") or {}
    status = call.get("status", "result")
    bold, mono, muted = QTextCharFormat(), _mono(), _mono()
    bold.setFontWeight(700)
    muted.setForeground(view.palette().placeholderText())
    indent = QTextBlockFormat()
    indent.setLeftMargin(18)
    said = STATUS.get(status, status)
    cursor.insertText(terminal_text(f"Tool: {call.get('name', '?')}"), bold)
    cursor.insertText(terminal_text(f"  ·  {call.get('server') or 'no server'}"
                                    + (f"  ·  {said}" if said else "")), QTextCharFormat())
    arguments = call.get("arguments")
    shown = json.dumps(arguments, ensure_ascii=False, indent=1) \
        if isinstance(arguments, (dict, list)) else str(arguments or "{}")
    if len(shown) > SHOWN_ARGS:
        shown = shown[:SHOWN_ARGS] + f"\n… {len(shown) - SHOWN_ARGS:,} more characters"
    for line in terminal_text(shown).split("\n"):
        cursor.insertBlock(indent, mono)
        cursor.insertText(line, mono)
    if status not in ("asking", "running"):
        result = message.get("content") or "(no result)"
        lines = result.split("\n")
        folded = not message.get("tool_open") and (len(lines) > FOLD_LINES or
                                                   len(result) > FOLD_CHARS)
        if folded:
            lines = result[:FOLD_CHARS].split("\n")[:FOLD_LINES]
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        cursor.insertText("Error:" if call.get("error") else "Result:", bold)
        for line in terminal_text("\n".join(lines)).split("\n"):
            cursor.insertBlock(indent, muted)
            cursor.insertText(line, muted)
        if folded or message.get("tool_open"):
            cursor.insertBlock(indent, QTextCharFormat())
            count = result.count("\n") + 1
            view._link(cursor, "toolfold", index,
                       f"▸ Show all ({count:,} lines, {len(result):,} characters)" if folded
                       else "▾ Fold")
    cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
    italic = QTextCharFormat()
    italic.setFontItalic(True)
    for number, (kind, label) in enumerate(actions):
        if number:
            cursor.insertText(" · ", italic)
        view._link(cursor, kind, index, label)
    cursor.setCharFormat(QTextCharFormat())


def _mono() -> QTextCharFormat:
    fmt = QTextCharFormat()
    fmt.setFont(QFontDatabase.systemFont(QFontDatabase.FixedFont))
    return fmt
