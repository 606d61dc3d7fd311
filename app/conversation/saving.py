"""A conversation's request into the store: the question (a new version of a
message after an edit), the answer's row while it streams, and the answer
with its stats when it ends. `store` is a ChatStore (app/store), handed in."""

from __future__ import annotations

from app.conversation.conversation import Conversation
from app.conversation.stats import format_footer


def save_question(store, chat_id: int, conversation: Conversation) -> None:
    """The request started: store its question (unless it is stored already:
    a regenerate or a continue) and an empty, incomplete answer to stream
    into. Each message follows the one before it: after an edit or a
    regenerate that makes it a new version (a branch), nothing deleted."""
    messages = conversation.messages
    if not conversation.resend_without_user:
        files, images = messages[-1].get("attachments"), messages[-1].get("images")
        stats = ({"attachments": files} if files else {}) | ({"images": images} if images else {})
        messages[-1]["id"] = store.add_message(
            chat_id, "user", messages[-1]["content"],
            parent_id=conversation.parent_id(len(messages) - 1), stats=stats or None,
            images=[i for i in conversation.sending_images  # an edit's are kept already
                    if i.data and any(r["digest"] == i.digest for r in images or ())])
    conversation.resend_without_user = False
    conversation.sending_images = []
    if conversation.continue_from is None:
        conversation.answer_message_id = store.add_message(
            chat_id, "assistant", "", complete=False, parent_id=messages[-1]["id"])


def save_progress(store, conversation: Conversation) -> None:
    """The streaming answer's text so far (the window does this every second)."""
    if conversation.answer is not None and conversation.answer_message_id is not None:
        store.update_message(conversation.answer_message_id, conversation.answer.text,
                             reasoning=conversation.answer.reasoning)


def save_answer(store, answer_id: int | None, conversation: Conversation, finished) -> None:
    """The answer ended (Conversation.finish ran): store it, complete, with
    its stats (kept for the footer and the context meter after a restart)."""
    if answer_id is None:
        return
    last = conversation.messages[-1] if conversation.messages else {}
    answered = last.get("role") == "assistant"
    store.update_message(answer_id, last["content"] if answered else "", complete=True,
                         reasoning=last.get("reasoning", "") if answered else "", stats={
                             "thinking_s": last.get("thinking_s") if answered else None,
                             "footer": format_footer(finished), "reason": finished.reason,
                             "lanes": finished.lanes, "output_tokens": finished.output_tokens,
                             "cached_tokens": finished.cached_tokens,
                             "ttft_s": finished.ttft_s,
                             "prompt_tokens": finished.prompt_tokens,
                             "format": last.get("format") if answered else None})
