"""A chat's conversation as a tree, from its tab: edit a question or
regenerate an answer to make a new version beside the old one (nothing is
dropped until the new one is sent), continue an interrupted answer, switch
versions (‹ 2/3 ›). The rules are the tab's `conversation`
(app/conversation/conversation.py); this part of ChatTab (app/chat/chat_tab.py)
puts them on screen: the composer, the edit row, the transcript."""

from __future__ import annotations

from PySide6.QtGui import QTextCursor

from app.conversation.attach_files import split_message
from app.conversation.chat_images import ImageFile, records_of


class ChatVersions:
    def _regenerate(self) -> None:
        if self.conversation.has_answer():
            self.regenerate_answer(len(self.conversation.messages) - 1)

    def _edit(self) -> None:
        index = self.conversation.last("user")
        if index is not None:
            self.edit_message(index)

    def regenerate_answer(self, index: int) -> None:
        """Answer again from the conversation before answer `index`: a new
        version of that answer (the old one and what followed it stay, ‹ ›)."""
        if self.is_streaming:
            return
        self.cancel_edit()
        if not self.conversation.regenerate(index):
            return
        self._set_streaming(True)
        self.render()
        self.send_requested.emit(self.prompt_messages())

    def continue_answer(self, index: int) -> None:
        """Go on writing interrupted answer `index` (the last message) from
        where it stopped; the window asks the engine for the rest."""
        why_not = self.conversation.continue_answer(index)
        if why_not is not None:
            if why_not:
                self.footer.setText(why_not)
            return
        self._set_streaming(True)
        self.render()
        self.send_requested.emit(self.prompt_messages())

    def message_actions(self, index: int, message: dict) -> list[tuple[str, str]]:
        return self.conversation.actions(message)

    def version(self, index: int) -> tuple[int, int] | None:
        """(which, of how many) versions messages[index] is, when it has others."""
        return self.conversation.version(index)

    def edit_message(self, index: int) -> None:
        """Put user message `index` in the composer to edit. Nothing changes
        until it is sent (then it is a new version of that message); Esc or
        Cancel edit puts back what the composer held."""
        was_editing = self.conversation.editing is not None
        draft = (self.composer.toPlainText(), list(self.attachment_bar.files),
                 list(self.attachment_bar.images))
        message = self.conversation.begin_edit(index)
        if message is None:
            return
        if not was_editing:
            self._draft = draft
        self._put_back(message)
        self.composer.moveCursor(QTextCursor.End)
        self.composer.setFocus()
        self.edit_row.setVisible(True)

    @property
    def editing(self) -> int | None:
        """The user message being edited (its index), if any."""
        return self.conversation.editing

    def cancel_edit(self) -> bool:
        """Leave editing, the conversation as it was. False when not editing."""
        if not self.conversation.end_edit():
            return False
        self.edit_row.setVisible(False)
        text, files, images = self._draft
        self.composer.setPlainText(text)
        self.attachment_bar.set_files(files, images)
        self.composer.setFocus()
        return True

    def _put_back(self, message: dict) -> None:
        """A user message back in the composer: its words, and its files and
        images attached (an image as kept: its thumbnail from the store)."""
        text, files = split_message(message["content"], message.get("attachments") or [])
        store = self.image_store
        images = [ImageFile(r["name"], b"", r["width"], r["height"], r["format"], r["digest"],
                            (store.thumbnail(r["digest"]) if store is not None else None) or b"",
                            kept_size=r["size"])
                  for r in records_of(message)]
        self.composer.setPlainText(text)
        self.attachment_bar.set_files(files, images)

    def set_versions(self, versions: dict[int, list[int]]) -> None:
        """The store's versions changed (an edit or regenerate was stored)."""
        if self.conversation.set_versions(versions):
            self.render()

    def scroll_to(self, message_id: int) -> bool:
        """Show stored message `message_id` (False: not in the branch shown)."""
        index = self.conversation.index_of(message_id)
        if index is None or not self.transcript.scroll_to_message(index):
            return False
        self.transcript.setFocus()
        return True

    def show_history(self, messages: list[dict], footers: dict[int, str],
                     versions: dict[int, list[int]], context_used: int | None = None) -> None:
        """Show another branch of the conversation (‹ ›), as the store has it."""
        if self.is_streaming:
            return
        self.cancel_edit()
        self.conversation.show_history(messages, footers, versions, context_used)
        self.render()
        self._set_streaming(False)
