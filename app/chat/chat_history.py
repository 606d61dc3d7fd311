"""Switching a chat tab to another version of a message (‹ ›): the store
keeps it as the chat's shown branch and the tab shows it."""

from __future__ import annotations

from app.conversation.history import load_history


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
    tab.show_history(history.messages, history.footers, history.versions,
                     history.context_used)
    if window.engine is not None:
        tab.show_context(history.context_used, window.engine.context_length)
