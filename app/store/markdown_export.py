"""A chat as Markdown (Export, and "Export chats…" while changes wait to be
saved: app/window/saving_status.py).

Qt-free. The branch shown, as the app shows it: thinking folded, images
named (the pictures stay in the app and a JSON export), a tool turn a quoted
block whose call and result are code that their own text cannot close.
"""

from __future__ import annotations

import json
from typing import Any

from .records import Chat, Message


def chat_markdown(chat: Chat, messages: list[Message]) -> str:
    """`chat` and its shown branch `messages`, first message first."""
    lines = [f"# {chat.title}", ""]
    if chat.system_prompt:
        lines += [f"> System: {chat.system_prompt}", ""]
    for m in messages:
        if m.role == "tool":  # a quoted block: the call, then its result
            lines += tool_markdown(m.tool or {}, m.content)
            continue
        who = {"user": "You", "assistant": "Assistant", "system": "System"}[m.role]
        lines += [f"## {who}", ""]
        if m.reasoning:  # folded, as in the app
            lines += ["<details><summary>Thinking</summary>", "", m.reasoning.strip(), "",
                      "</details>", ""]
        for image in (m.stats or {}).get("images") or () if m.stats else ():
            if isinstance(image, dict):  # the picture stays in the app (and a JSON export)
                lines += [f"*[image: {_code(image.get('name') or 'image')}]*", ""]
        if m.content or not (m.tool or {}).get("calls"):
            lines += [m.content, ""]
        if m.stats and m.stats.get("footer"):
            lines += [f"*{m.stats['footer']}*", ""]
    return "\n".join(lines).rstrip() + "\n"


def tool_markdown(call: dict[str, Any], result: str) -> list[str]:
    """A tool turn in a Markdown export: a quoted block whose call and result
    are code (a tool's text is data: a fence longer than any run of
    backticks in it, so it cannot close the block early)."""
    arguments = call.get("arguments")
    shown = json.dumps(arguments, ensure_ascii=False, indent=1) \
        if isinstance(arguments, (dict, list)) else str(arguments or "{}")
    status = call.get("status") or ("error" if call.get("error") else "result")
    lines = [f"> **Tool** `{_code(call.get('server') or '')}` › `{_code(call.get('name') or '?')}`"
             f" ({status})", ">"]
    for text in (shown, result):
        fence = "`" * max(3, _longest_backticks(text) + 1)
        lines += [f"> {fence}"] + [f"> {line}" for line in text.split("\n")] + [f"> {fence}",
                                                                               ">"]
    return lines[:-1] + [""]


def _code(text: str) -> str:
    return str(text).replace("`", "'").replace("\n", " ")[:200]


def _longest_backticks(text: str) -> int:
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return longest
