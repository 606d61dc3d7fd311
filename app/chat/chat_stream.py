"""An answer as it streams into its tab: the text (and a reasoning model's
thinking first), then the finished message with its stats line, or the
request's failure with what was typed given back. A part of ChatTab
(app/chat/chat_tab.py), kept apart for size."""

from __future__ import annotations

import time

from app.conversation import thinking


class ChatStream:
    def append_reasoning(self, text: str) -> None:
        """More of a reasoning model's thinking (before its answer)."""
        if self.streaming_text is None:
            return
        if self._thinking_since is None:
            self._thinking_since = time.monotonic()
        self.streaming_reasoning += text
        self._show_stream()

    def append_text(self, text: str) -> None:
        if self.streaming_text is None:
            return
        if self.streaming_reasoning and self.thinking_s is None and text:
            # The answer begins: the thoughts fold into one line (re-rendered).
            self.thinking_s = time.monotonic() - (self._thinking_since or time.monotonic())
            self.transcript.end_streaming()
        self.streaming_text += text
        self._show_stream()

    def _show_stream(self) -> None:
        if self.isVisible():  # background tabs catch up when shown
            self.transcript.show_streaming(self.stream_markdown())
        else:
            self._stale = True

    def stream_markdown(self) -> str:
        """What the streaming answer shows: its thinking first, if any."""
        if not self.streaming_reasoning:
            return self.streaming_text or ""
        return thinking.live(self.streaming_reasoning, self.streaming_text or "",
                             self.thinking_s)

    def _reset_stream(self) -> None:
        self.streaming_text = None
        self.streaming_reasoning = ""
        self._thinking_since = self.thinking_s = None

    def finish(self, finished) -> None:
        """The answer is complete (or stopped): keep it and show its stats."""
        answer = self.streaming_text or ""
        self.continue_from = None
        self.transcript.end_streaming()
        reasoning = self.streaming_reasoning
        if reasoning and self.thinking_s is None and self._thinking_since is not None:
            self.thinking_s = time.monotonic() - self._thinking_since  # it never answered
        if answer or reasoning or finished.reason != "error":
            self.messages.append({"role": "assistant", "content": answer,
                                  "id": self.answer_message_id, "reasoning": reasoning,
                                  "thinking_s": self.thinking_s,
                                  "format": self.answer_format})
            index = len(self.messages) - 1
            self.footers[index] = format_footer(finished)
            self.transcript.add_message(index, self.messages[index], self.footers[index],
                                        self.message_actions(index, self.messages[index]),
                                        version=self.version(index))
        self._reset_stream()
        self.request_id = None
        self._before = None
        self.footer.setText(format_footer(finished))
        self._set_streaming(False)

    def fail(self, message: str) -> None:
        """The request could not start: drop the pending answer, keep the text
        (an edit or a regenerate: the branch shown before it comes back)."""
        if self._before is not None:
            if not self.resend_without_user and self.messages[-1]["role"] == "user":
                # An edit: still being edited, its text (and files) in the composer.
                self._put_back(self.messages[-1])
                self.editing = len(self.messages) - 1
                self.edit_row.setVisible(True)
            self.messages, self.footers = self._before
            self._before = None
            self.resend_without_user = False
        elif self.continue_from is not None:  # the interrupted answer stays as it was
            self.messages.append({"role": "assistant", "content": self.continue_from,
                                  "id": self.answer_message_id, "interrupted": True})
            self.continue_from = None
            self.answer_message_id = None
            self.resend_without_user = False
        elif self.resend_without_user:  # a regenerate: its user turn stays where it is
            self.resend_without_user = False
        elif self.messages and self.messages[-1]["role"] == "user":
            self._put_back(self.messages.pop())
        self._reset_stream()
        self.request_id = None
        self.footer.setText(f"⚠ {message}")
        self._set_streaming(False)
        self.render()


def format_footer(done) -> str:
    """'prefill CPU -> decode CPU · 42 tokens · 15.1 tok/s · TTFT 220 ms · 32 cached'."""
    if done.reason == "error":
        return f"⚠ {done.error or 'generation failed'}"
    lanes = " → ".join(f"{phase} {lane.upper()}" for phase, lane in done.lanes) or "not started"
    bits = [lanes, f"{done.output_tokens} tokens"]
    if done.tokens_per_s:
        bits.append(f"{done.tokens_per_s:.1f} tok/s")
    if done.ttft_s is not None:
        bits.append(f"TTFT {done.ttft_s * 1000:.0f} ms")
    if getattr(done, "prefix_note", None):  # the model's caches cannot be reused as prefixes
        bits.append(f"{done.prompt_tokens} prompt tokens (no prefix cache for this model)")
    else:
        bits.append(f"{done.cached_tokens}/{done.prompt_tokens} prompt tokens cached")
    if done.reason == "cancelled":
        bits.append("stopped")
    elif done.reason == "length":
        bits.append("hit the length limit")
    return " · ".join(bits)
