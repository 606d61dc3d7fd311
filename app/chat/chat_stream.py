"""An answer as it streams into its tab: the text (and a reasoning model's
thinking first), then the finished message with its stats line, or the
request's failure with what was typed given back. The data is the tab's
`conversation` (app/conversation/conversation.py); this part of ChatTab
(app/chat/chat_tab.py) shows it."""

from __future__ import annotations

from app.conversation.stats import format_footer


class ChatStream:
    def append_reasoning(self, text: str) -> None:
        """More of a reasoning model's thinking (before its answer)."""
        if self.conversation.add_reasoning(text):
            self._show_stream()

    def append_text(self, text: str) -> None:
        if not self.conversation.is_streaming:
            return
        if self.conversation.add_text(text):
            self.transcript.end_streaming()  # the thoughts fold into one line
        self._show_stream()

    def _show_stream(self) -> None:
        if self.isVisible():  # background tabs catch up when shown
            self.transcript.show_streaming(self.stream_markdown(), self.stream_drafted())
        else:
            self._stale = True

    def stream_markdown(self) -> str:
        """What the streaming answer shows: its thinking first, if any."""
        answer = self.conversation.answer
        return answer.markdown() if answer is not None else ""

    def stream_drafted(self) -> list[str]:
        """The streaming answer's accepted drafts' text (View > Tint)."""
        answer = self.conversation.answer
        return answer.drafted if answer is not None else []

    def finish(self, finished) -> None:
        """The answer is complete (or stopped): kept, its stats line under it."""
        self.transcript.end_streaming()
        conversation = self.conversation
        index = conversation.finish(finished)
        if index is not None:
            message = conversation.messages[index]
            self.transcript.add_message(index, message, conversation.footers[index],
                                        self.message_actions(index, message),
                                        version=self.version(index))
            self.footer.setText("")  # the answer's own line says it: once
        else:  # nothing was written: the only place to say why
            self.footer.setText(format_footer(finished))
        self._set_streaming(False)

    def fail(self, message: str) -> None:
        """The request could not start: drop the pending answer, keep the text
        (an edit or a regenerate: the branch shown before it comes back)."""
        put_back = self.conversation.fail()
        if put_back is not None:
            self._put_back(put_back)
        self.edit_row.setVisible(self.conversation.editing is not None)
        self.footer.setText(f"⚠ {message}")
        self._set_streaming(False)
        self.render()

