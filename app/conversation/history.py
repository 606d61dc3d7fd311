"""A chat's history as the store has it: the branch shown, the versions of
its messages (‹ 2/3 ›), the answers' stats lines and the context the chat
used. The store is handed in (app/store imports this room, not the other way)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.conversation.chat_images import records_of


@dataclass
class History:
    messages: list[dict]  # {"role", "content", "id", "interrupted"}
    footers: dict[int, str]  # message index -> its answer's stats line
    versions: dict[int, list[int]]  # message id -> its versions' ids
    context_used: int  # tokens of the conversation, as of its last answer


def load_history(store, chat_id: int) -> History:
    """`store`: a ChatStore (app/store)."""
    return history_of(*store.branch(chat_id))  # few queries, even for 100,000 messages


def history_of(stored: list[Any], versions: dict[int, list[int]]) -> History:
    """The History of a branch's messages (ChatStore.branch, or a worker's
    read of it: store/bulk_write.py)."""
    # An answer still marked incomplete was cut (the app was killed, or its
    # tab closed mid-stream): it shows as interrupted, with Continue.
    messages = [{"role": m.role, "content": m.content, "id": m.id,
                 "interrupted": m.role == "assistant" and not m.complete,
                 "reasoning": m.reasoning, "thinking_s": (m.stats or {}).get("thinking_s"),
                 "attachments": (m.stats or {}).get("attachments"),
                 "images": records_of(m.stats or {}),
                 "format": (m.stats or {}).get("format"), "tool": m.tool}
                for m in stored]
    footers = {i: m.stats["footer"] for i, m in enumerate(stored)
               if m.stats and m.stats.get("footer")}
    last = next((m.stats for m in reversed(stored)
                 if m.stats and "prompt_tokens" in m.stats), None) or {}
    return History(messages, footers, versions,
                   last.get("prompt_tokens", 0) + last.get("output_tokens", 0))
