"""A chat's conversation as plain data, no Qt: the branch of messages shown,
the versions of each (‹ 2/3 ›), the answers' stats lines, the message being
edited, and the answer being streamed. The chat tab (app/chat/) renders it and
turns clicks into calls here; app/conversation/saving.py stores it.

Versions: an edit of a question or a regenerate of an answer is a new
version beside the old one, made when it is sent (nothing is deleted); if the
request cannot start, the branch shown before comes back (`fail`)."""

from __future__ import annotations

import time
from collections.abc import Callable

from app.conversation import thinking
from app.conversation.attach_files import join_message
from app.conversation.stats import format_footer
from app.conversation.tool_turns import prompt_messages

Message = dict  # {"role", "content", "id", "interrupted", "reasoning", "attachments", "tool", ...}

# A tool turn's outcome (Message["tool"]["status"]); "asking" and "running"
# while the call waits for the user or for its server.
TOOL_STATUSES = ("asking", "running", "result", "error", "denied", "stopped", "refused")


class Answer:
    """The answer being written: its text, a reasoning model's thinking
    before it, and how long it thought."""

    def __init__(self, text: str = "", reasoning: str = "", thinking_s: float | None = None):
        self.text = text
        self.reasoning = reasoning
        self.thinking_since: float | None = None  # monotonic: when thinking began
        self.thinking_s = thinking_s  # how long it thought (once the answer began)
        self.drafted: list[str] = []  # text of accepted drafts, in order (View > Tint)

    def markdown(self) -> str:
        """What the streaming answer shows: its thinking first, if any."""
        if not self.reasoning:
            return self.text
        return thinking.live(self.reasoning, self.text, self.thinking_s)


class Conversation:
    def __init__(self, messages: list[Message] | None = None,
                 footers: dict[int, str] | None = None,
                 versions: dict[int, list[int]] | None = None, context_used: int = 0,
                 clock: Callable[[], float] = time.monotonic):
        self.messages: list[Message] = [dict(m) for m in messages or []]
        self.footers: dict[int, str] = dict(footers or {})  # message index -> stats line
        # Message id -> the ids of its versions (itself included), for ‹ 2/3 ›.
        self.versions: dict[int, list[int]] = dict(versions or {})
        self.context_used = context_used  # tokens of the conversation, as of its last answer
        self.editing: int | None = None  # the user message being edited (index)
        self.answer: Answer | None = None  # the answer being written
        self.request_id: str | None = None
        self.answer_message_id: int | None = None  # the stored row of the streaming answer
        self.resend_without_user = False  # a regenerate or continue: the user turn is stored
        self.continue_from: str | None = None  # an interrupted answer being continued
        self.answer_format: str | None = None  # "json": the answer is shown formatted
        self.tools_busy = False  # between an answer's tool calls and the next round
        # The images of the question just sent (ImageFile, with their bytes),
        # until it is stored (saving.save_question).
        self.sending_images: list = []
        # The shown branch before an edit or regenerate was sent: back if it fails.
        self._before: tuple[list[Message], dict[int, str]] | None = None
        self._clock = clock

    # ---- what is shown --------------------------------------------------------------
    @property
    def is_streaming(self) -> bool:
        """An answer is being written."""
        return self.answer is not None

    @property
    def busy(self) -> bool:
        """An answer is being written, or its tool calls run: the chat waits."""
        return self.answer is not None or self.tools_busy

    @property
    def streaming_text(self) -> str | None:
        """The answer's text so far; None when no answer is being written."""
        return self.answer.text if self.answer is not None else None

    def prompt(self, system: str = "", tools: bool = False) -> list[dict]:
        """The messages to send: the system prompt (if any) and the chat,
        tool turns as the model takes them (app/conversation/tool_turns.py)."""
        return prompt_messages(self.messages, system, tools)

    def last(self, role: str) -> int | None:
        return next((i for i in range(len(self.messages) - 1, -1, -1)
                     if self.messages[i]["role"] == role), None)

    def has_answer(self) -> bool:
        return bool(self.messages) and self.messages[-1]["role"] == "assistant"

    def shown_footers(self, interrupted: str) -> dict[int, str]:
        """Each message's line under it: its stats, or `interrupted`."""
        return {i: interrupted for i, m in enumerate(self.messages)
                if m.get("interrupted")} | self.footers

    def parent_id(self, index: int) -> int | None:
        """The stored message messages[index] follows (None: it is the first)."""
        return self.messages[index - 1].get("id") if index > 0 else None

    def version(self, index: int) -> tuple[int, int] | None:
        """(which, of how many) versions messages[index] is, when it has others."""
        ids = self.versions.get(self.messages[index].get("id"))
        return (ids.index(self.messages[index]["id"]) + 1, len(ids)) if ids else None

    def version_beside(self, index: int, step: int) -> int | None:
        """The stored id of the version `step` (+1 / -1) from messages[index]."""
        if not 0 <= index < len(self.messages):
            return None
        ids = self.versions.get(self.messages[index].get("id"), [])
        at = ids.index(self.messages[index]["id"]) + step if ids else -1
        return ids[at] if 0 <= at < len(ids) else None

    def index_of(self, message_id: int) -> int | None:
        return next((i for i, m in enumerate(self.messages) if m.get("id") == message_id), None)

    @staticmethod
    def actions(message: Message) -> list[tuple[str, str]]:
        """The links under a message: (kind, label)."""
        if message["role"] == "tool":  # no result yet: nothing to copy
            waiting = (message.get("tool") or {}).get("status") in ("asking", "running")
            return [] if waiting else [("copymsg", "Copy result")]
        if message["role"] == "user":
            actions = [("edit", "Edit")]
        elif message.get("interrupted"):
            actions = [("continue", "Continue"), ("regen", "Regenerate")]
        else:
            actions = [("regen", "Regenerate")]
        return actions + [("copymsg", "Copy")]

    def toggle_thinking(self, index: int, what: str = "thinking_open") -> bool:
        """Open / fold a message's thoughts (or, `what` "tool_open", a tool's
        long result); False if there is no such message."""
        if not 0 <= index < len(self.messages):
            return False
        message = self.messages[index]
        message[what] = not message.get(what)
        return True

    # ---- what the user does ---------------------------------------------------------
    def send(self, text: str, files: list, images: list | None = None) -> bool:
        """A question (with attached files and images: ImageFile,
        app/conversation/chat_images.py): appended, and an answer begins.
        True when an edit was sent (the branch changed: render it whole)."""
        branched = self.editing is not None
        if branched:  # the edit becomes a new version of that message
            index, self.editing = self.editing, None
            self._branch_at(index)
        content, record = join_message(text, files)
        message = {"role": "user", "content": content, "attachments": record}
        if images:
            message["images"] = [image.record() for image in images]
        self.messages.append(message)
        self.sending_images = list(images or [])
        self.answer = Answer()
        return branched

    def regenerate(self, index: int) -> bool:
        """Answer again from the conversation before answer `index`: a new
        version of that answer (the old one and what followed it stay, ‹ ›)."""
        if (self.busy or not 0 <= index < len(self.messages)
                or self.messages[index]["role"] != "assistant"):
            return False
        self._branch_at(index)
        self.resend_without_user = True  # its user turn is already stored
        self.answer = Answer()
        return True

    def continue_answer(self, index: int) -> str | None:
        """Go on writing interrupted answer `index` (the last message) from
        where it stopped. Returns why not, or None when it goes on."""
        message = self.messages[index] if 0 <= index < len(self.messages) else None
        if self.busy or message is None or not message.get("interrupted"):
            return ""
        if index != len(self.messages) - 1:
            return "Only the last answer can be continued; regenerate this one."
        self.messages.pop()
        self.footers.pop(index, None)
        self.continue_from = message["content"]
        self.answer_message_id = message.get("id")
        self.resend_without_user = True
        self.answer = Answer(message["content"], message.get("reasoning") or "",
                             message.get("thinking_s"))  # thought before the cut
        return None

    def begin_edit(self, index: int) -> Message | None:
        """User message `index` to edit: nothing changes until it is sent
        (then it is a new version of that message). The message to put in
        the composer, or None when it cannot be edited."""
        if (self.busy or not 0 <= index < len(self.messages)
                or self.messages[index]["role"] != "user"):
            return None
        self.editing = index
        return self.messages[index]

    def end_edit(self) -> bool:
        """Leave editing, the conversation as it was. False when not editing."""
        editing, self.editing = self.editing, None
        return editing is not None

    def _branch_at(self, index: int) -> None:
        """Show the conversation before messages[index]: the next message sent
        is a new version of it. The store keeps the old branch (ids are kept,
        nothing is deleted); `_before` brings it back if the request fails."""
        self._before = ([dict(m) for m in self.messages], dict(self.footers))
        del self.messages[index:]
        self.footers = {i: f for i, f in self.footers.items() if i < index}

    # ---- the answer as it streams -----------------------------------------------------
    def add_reasoning(self, text: str) -> bool:
        """More of a reasoning model's thinking; False when nothing streams."""
        if self.answer is None:
            return False
        if self.answer.thinking_since is None:
            self.answer.thinking_since = self._clock()
        self.answer.reasoning += text
        return True

    def add_text(self, text: str) -> bool:
        """More of the answer. True when this begins the answer after its
        thoughts (they fold into one line: the view re-renders them)."""
        answer = self.answer
        if answer is None:
            return False
        folds = bool(answer.reasoning) and answer.thinking_s is None and bool(text)
        if folds:
            answer.thinking_s = self._clock() - (answer.thinking_since or self._clock())
        answer.text += text
        return folds

    def finish(self, finished) -> int | None:
        """The answer is complete (or stopped, or failed while writing): kept
        with its stats line. Returns its index, or None when nothing was written."""
        answer, index = self.answer or Answer(), None
        if answer.reasoning and answer.thinking_s is None and answer.thinking_since is not None:
            answer.thinking_s = self._clock() - answer.thinking_since  # it never answered
        if answer.text or answer.reasoning or finished.reason != "error":
            self.messages.append({"role": "assistant", "content": answer.text,
                                  "id": self.answer_message_id, "reasoning": answer.reasoning,
                                  "thinking_s": answer.thinking_s,
                                  "format": self.answer_format, "drafted": answer.drafted})
            index = len(self.messages) - 1
            self.footers[index] = format_footer(finished)
        self._end_request()
        return index

    def fail(self) -> Message | None:
        """The request could not start: drop the pending answer, keep the text
        (an edit or a regenerate: the branch shown before it comes back).
        Returns the question to put back in the composer, if any (an edit
        stays being edited)."""
        put_back = None
        if self._before is not None:
            if not self.resend_without_user and self.messages[-1]["role"] == "user":
                put_back = self.messages[-1]  # an edit: still being edited
                self.editing = len(self.messages) - 1
            self.messages, self.footers = self._before
        elif self.continue_from is not None:  # the interrupted answer stays as it was
            self.messages.append({"role": "assistant", "content": self.continue_from,
                                  "id": self.answer_message_id, "interrupted": True,
                                  "reasoning": self.answer.reasoning if self.answer else "",
                                  "thinking_s": self.answer.thinking_s if self.answer else None})
        elif not self.resend_without_user and self.messages and \
                self.messages[-1]["role"] == "user":
            put_back = self.messages.pop()
        self._end_request()
        return put_back

    # ---- tool turns (issue 36) ----------------------------------------------------------
    def record_calls(self, index: int, calls: list[dict]) -> None:
        """Answer `index` called these tools ({"id", "name", "server",
        "arguments"}): their results follow it, then the next round."""
        self.messages[index]["tool"] = {"calls": [dict(c) for c in calls]}
        self.tools_busy = True

    def add_tool_turn(self, call: dict, status: str = "asking") -> int:
        """A call's block, before its result; returns its index."""
        self.messages.append({"role": "tool", "content": "",
                              "tool": {**call, "status": status, "error": False}})
        return len(self.messages) - 1

    def set_tool_result(self, index: int, text: str, status: str, error: bool) -> None:
        message = self.messages[index]
        message["content"] = text
        message["tool"] = {**message["tool"], "status": status, "error": bool(error)}

    def next_round(self) -> None:
        """The results are in: the answer goes on, as a new message after them."""
        self.tools_busy = False
        self.resend_without_user = True  # nothing new from the user to store
        self.answer = Answer()

    def end_tools(self) -> None:
        self.tools_busy = False

    def _end_request(self) -> None:
        self.answer = None
        self.request_id = None
        self.answer_message_id = None
        self._before = None
        self.continue_from = None
        self.resend_without_user = False

    # ---- the store's view ---------------------------------------------------------------
    def show_history(self, messages: list[Message], footers: dict[int, str],
                     versions: dict[int, list[int]], context_used: int | None = None) -> bool:
        """Show another branch (‹ ›), as the store has it. False while streaming."""
        if self.busy:
            return False
        self.editing = None
        self.messages = [dict(m) for m in messages]
        self.footers, self.versions = dict(footers), dict(versions)
        if context_used is not None:
            self.context_used = context_used
        return True

    def set_versions(self, versions: dict[int, list[int]]) -> bool:
        """The store's versions changed (an edit or regenerate was stored);
        True when they differ from those shown."""
        if versions == self.versions:
            return False
        self.versions = dict(versions)
        return True
