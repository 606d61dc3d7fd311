"""A chat's history from the database into its tab: the branch shown, the
versions of its messages (‹ 2/3 ›), the answers' footers and the context the
chat used; and switching to another version of a message."""

from __future__ import annotations

from dataclasses import dataclass

from app.store import ChatStore
from app.store.chats import Message


@dataclass
class History:
    messages: list[dict]  # {"role", "content", "id", "interrupted"}
    footers: dict[int, str]  # message index -> its answer's stats line
    versions: dict[int, list[int]]  # message id -> its versions' ids
    context_used: int  # tokens of the conversation, as of its last answer


def load_history(store: ChatStore, chat_id: int) -> History:
    return history_of(*store.branch(chat_id))  # few queries, even for 100,000 messages


def history_of(stored: list[Message], versions: dict[int, list[int]]) -> History:
    """The History of a branch's messages (ChatStore.branch, or a worker's
    read of it: store/bulk_write.py)."""
    # An answer still marked incomplete was cut (the app was killed, or its
    # tab closed mid-stream): it shows as interrupted, with Continue.
    messages = [{"role": m.role, "content": m.content, "id": m.id,
                 "interrupted": m.role == "assistant" and not m.complete,
                 "reasoning": m.reasoning, "thinking_s": (m.stats or {}).get("thinking_s"),
                 "attachments": (m.stats or {}).get("attachments"),
                 "format": (m.stats or {}).get("format")}
                for m in stored]
    footers = {i: m.stats["footer"] for i, m in enumerate(stored)
               if m.stats and m.stats.get("footer")}
    last = next((m.stats for m in reversed(stored)
                 if m.stats and "prompt_tokens" in m.stats), None) or {}
    return History(messages, footers, versions,
                   last.get("prompt_tokens", 0) + last.get("output_tokens", 0))


def show_version(window, tab, message_id: int) -> None:
    """Show the branch through stored message `message_id` in `tab`, and keep
    it as the chat's shown branch. Its prompt prefix is likely still in the
    engine's prefix cache, so answering on it again is cheap."""
    if tab.is_streaming:
        return
    try:
        window.store.show_version(message_id)
    except KeyError:  # deleted meanwhile (another window cannot exist: one process per db)
        return
    history = load_history(window.store, tab.chat_id)
    tab.show_history(history.messages, history.footers, history.versions)
    tab.context_used = history.context_used
    if window.engine is not None:
        tab.show_context(tab.context_used, window.engine.context_length)
