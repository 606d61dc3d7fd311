"""A chat's conversation as a tree, from its tab: edit a question or
regenerate an answer to make a new version beside the old one (nothing is
dropped until the new one is sent), continue an interrupted answer, switch
versions (‹ 2/3 ›). A part of ChatTab (app/chat/chat_tab.py), kept apart for size:
it uses the tab's messages, composer, transcript and signals."""

from __future__ import annotations

from PySide6.QtGui import QTextCursor

from app.conversation.attach_files import split_message


class ChatVersions:
    def _last(self, role: str) -> int | None:
        return next((i for i in range(len(self.messages) - 1, -1, -1)
                     if self.messages[i]["role"] == role), None)

    def _regenerate(self) -> None:
        if self.messages and self.messages[-1]["role"] == "assistant":
            self.regenerate_answer(len(self.messages) - 1)

    def _edit(self) -> None:
        index = self._last("user")
        if index is not None:
            self.edit_message(index)

    def _branch_at(self, index: int) -> None:
        """Show the conversation before messages[index]: the next message sent
        is a new version of it. The store keeps the old branch (ids are kept,
        nothing is deleted); `_before` brings it back here if the request fails."""
        self._before = ([dict(m) for m in self.messages], dict(self.footers))
        del self.messages[index:]
        self.footers = {i: f for i, f in self.footers.items() if i < index}

    def parent_id(self, index: int) -> int | None:
        """The stored message messages[index] follows (None: it is the first)."""
        return self.messages[index - 1].get("id") if index > 0 else None

    def regenerate_answer(self, index: int) -> None:
        """Answer again from the conversation before answer `index`: a new
        version of that answer (the old one and what followed it stay, ‹ ›)."""
        if (self.is_streaming or not 0 <= index < len(self.messages)
                or self.messages[index]["role"] != "assistant"):
            return
        self.cancel_edit()
        self._branch_at(index)
        self.resend_without_user = True  # its user turn is already stored
        self.streaming_text = ""
        self._set_streaming(True)
        self.render()
        self.send_requested.emit(self.conversation())

    def continue_answer(self, index: int) -> None:
        """Go on writing interrupted answer `index` (the last message) from
        where it stopped; the window asks the engine for the rest."""
        message = self.messages[index] if 0 <= index < len(self.messages) else None
        if self.is_streaming or message is None or not message.get("interrupted"):
            return
        if index != len(self.messages) - 1:
            self.footer.setText("Only the last answer can be continued; regenerate this one.")
            return
        self.messages.pop()
        self.footers.pop(index, None)
        self.continue_from = message["content"]
        self.answer_message_id = message.get("id")
        self.resend_without_user = True
        self.streaming_text = message["content"]
        self.streaming_reasoning = message.get("reasoning") or ""  # thought before the cut
        self.thinking_s = message.get("thinking_s")
        self._set_streaming(True)
        self.render()
        self.send_requested.emit(self.conversation())

    def message_actions(self, index: int, message: dict) -> list[tuple[str, str]]:
        if message["role"] == "user":
            actions = [("edit", "Edit")]
        elif message.get("interrupted"):
            actions = [("continue", "Continue"), ("regen", "Regenerate")]
        else:
            actions = [("regen", "Regenerate")]
        return actions + [("copymsg", "Copy")]

    def version(self, index: int) -> tuple[int, int] | None:
        """(which, of how many) versions messages[index] is, when it has others."""
        ids = self.versions.get(self.messages[index].get("id"))
        return (ids.index(self.messages[index]["id"]) + 1, len(ids)) if ids else None

    def edit_message(self, index: int) -> None:
        """Put user message `index` in the composer to edit. Nothing changes
        until it is sent (then it is a new version of that message); Esc or
        Cancel edit puts back what the composer held."""
        if (self.is_streaming or not 0 <= index < len(self.messages)
                or self.messages[index]["role"] != "user"):
            return
        if self.editing is None:
            self._draft = (self.composer.toPlainText(), list(self.attachment_bar.files))
        self.editing = index
        self._put_back(self.messages[index])
        self.composer.moveCursor(QTextCursor.End)
        self.composer.setFocus()
        self.edit_row.setVisible(True)

    def cancel_edit(self) -> bool:
        """Leave editing, the conversation as it was. False when not editing."""
        if self.editing is None:
            return False
        self._end_edit()
        text, files = self._draft
        self.composer.setPlainText(text)
        self.attachment_bar.set_files(files)
        self.composer.setFocus()
        return True

    def _put_back(self, message: dict) -> None:
        """A user message back in the composer: its words, and its files attached."""
        text, files = split_message(message["content"], message.get("attachments") or [])
        self.composer.setPlainText(text)
        self.attachment_bar.set_files(files)
    def _end_edit(self) -> None:
        self.editing = None
        self.edit_row.setVisible(False)

    def set_versions(self, versions: dict[int, list[int]]) -> None:
        """The store's versions changed (an edit or regenerate was stored)."""
        if versions != self.versions:
            self.versions = dict(versions)
            self.render()

    def scroll_to(self, message_id: int) -> bool:
        """Show stored message `message_id` (False: not in the branch shown)."""
        index = next((i for i, m in enumerate(self.messages) if m.get("id") == message_id), None)
        if index is None or not self.transcript.scroll_to_message(index):
            return False
        self.transcript.setFocus()
        return True

    def show_history(self, messages: list[dict], footers: dict[int, str],
                     versions: dict[int, list[int]]) -> None:
        """Show another branch of the conversation (‹ ›), as the store has it."""
        if self.is_streaming:
            return
        self.cancel_edit()
        self.messages = [dict(m) for m in messages]
        self.footers, self.versions = dict(footers), dict(versions)
        self.render()
        self._set_streaming(False)
