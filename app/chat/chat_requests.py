"""A chat tab's request, from Send to the saved answer: the prompt is
tokenised off the GUI thread, submitted to the window's engine, streamed into
its tab and saved; Stop and closed tabs cancel it. It also names each request
for the Scheduler dock (its tab's title, or the API client) and feeds the
dock's timeline and decision log."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QMainWindow

from engine import EngineError, SamplingParams

from app.chat import tab_badges
from app.chat.attachment_bar import AttachmentLoader
from app.chat.chat_stream import format_footer
from app.chat.chat_tab import ChatTab
from app.scheduler.hybrid_ledger import note as note_for
from app.chat.prompt_prep import ChatMessages, PromptPreparer


def title_from(text: str, limit: int = 40) -> str:
    """A chat's title from its first question: whole words, '…' when cut."""
    words, title = " ".join(text.split()), ""
    if len(words) <= limit:
        return words
    for word in words.split(" "):
        if len(title) + len(word) + 1 > limit:
            break
        title = f"{title} {word}" if title else word
    return (title or words[:limit]) + "…"


class ChatRequests(QObject):
    """The window's requests: `submit`, `stop`, `forget` (a closed tab)."""

    def __init__(self, window: QMainWindow):
        super().__init__(window)
        self._window = window
        self._tab_of: dict[str, ChatTab] = {}  # request id -> the tab it streams into
        self._title_of: dict[str, str] = {}  # request id -> its tab's title (dock labels)
        self._chat_of: dict[str, int] = {}  # request id -> its chat
        self._answer_of: dict[str, int] = {}  # request id -> its stored answer
        self._preparer = PromptPreparer(self)
        self._preparer.ready.connect(self._start)
        self._loader = AttachmentLoader(self)
        self._loader.loaded.connect(self._attached)
        bridge = window.bridge
        bridge.tokens.connect(self._on_tokens)
        bridge.thinking.connect(self._on_thinking)
        bridge.finished.connect(self._on_finished)
        bridge.routed.connect(self._on_routed)
        bridge.migrated.connect(self._on_migrated)
        bridge.queued.connect(self._on_queued)
        window.scheduler.request_selected.connect(self._bring_forward)

    def submit(self, tab: ChatTab, messages: list[dict[str, str]]) -> None:
        engine = self._window.engine
        if engine is None:
            tab.fail("The model is still loading.")
            return
        # Tokenising (and building the answer's grammar, if the chat asks for
        # JSON) runs off the GUI thread; the request starts in _start.
        try:
            grammar = tab.settings_row.grammar()
        except ValueError:
            grammar = None  # said when the request starts (_start)
        self._preparer.start(tab, engine, messages, tab.continue_from, grammar)

    def attach(self, tab: ChatTab, paths: list[str]) -> None:
        """Read files for `tab` off the GUI thread and count their tokens with
        the model's tokenizer (a rough count while no model is loaded)."""
        engine = self._window.engine
        tokenizer = engine.tokenizer if engine is not None else None
        count = ((lambda text: len(tokenizer.encode(text))) if tokenizer is not None
                 else (lambda text: len(text) // 3))
        for path in paths:
            tab.attachment_bar.pending += 1
            self._loader.load(tab, path, count)

    def _attached(self, tab: ChatTab, attachment) -> None:
        if tab in self._window.chat_tabs():  # not closed meanwhile
            tab.attached(attachment)

    def stop(self, tab: ChatTab) -> None:
        engine = self._window.engine
        if self._preparer.cancel(tab):  # still being tokenised: it never started
            tab.fail("Stopped before it started.")
        elif engine is not None and tab.request_id:
            engine.cancel(tab.request_id)

    def forget(self, tab: ChatTab) -> None:
        """The tab is closing: nothing more streams into it."""
        self._preparer.cancel(tab)
        self._tab_of = {r: t for r, t in self._tab_of.items() if t is not tab}

    def label(self, event) -> str:
        """Who a request is for: its tab's title, or the API client."""
        title = self._title_of.get(event.request_id)
        if title is None and (event.tab_id or "").startswith("api:"):
            return f"API {event.tab_id[4:]}"
        return title or ""

    # ---- the request's life ------------------------------------------------------
    def _start(self, job, prepared) -> None:
        window, tab, messages = self._window, job.tab, job.messages
        if job.engine is not window.engine:  # another model was loaded meanwhile
            self.submit(tab, messages)
            return
        try:
            if isinstance(prepared, EngineError):
                raise prepared
            try:  # JSON asked for in the chat's settings: held to it token by token
                grammar = tab.settings_row.grammar()
            except ValueError as e:
                raise EngineError(str(e), "bad-argument") from None
            params = SamplingParams(**tab.settings(), grammar=grammar)
            tab.answer_format = "json" if grammar is not None else None
            if isinstance(prepared, ChatMessages):  # a remote model renders it
                handle = window.engine.submit(prepared.messages, params,
                                              tab_id=str(tab.chat_id))
            else:
                handle = window.engine.submit(prompt_ids=prepared, params=params,
                                              tab_id=str(tab.chat_id))
        except EngineError as e:
            tab.fail(str(e))
            return
        store = window.store
        tab.request_id = handle.request_id
        self._tab_of[handle.request_id] = tab
        # Each message follows the one before it in the tab: after an edit or
        # a regenerate that makes it a new version (a branch), nothing deleted.
        if not tab.resend_without_user:
            files = tab.messages[-1].get("attachments")
            tab.messages[-1]["id"] = store.add_message(
                tab.chat_id, "user", messages[-1]["content"],
                parent_id=tab.parent_id(len(tab.messages) - 1),
                stats={"attachments": files} if files else None)
        tab.resend_without_user = False
        if tab.continue_from is None:
            tab.answer_message_id = store.add_message(tab.chat_id, "assistant", "",
                                                      complete=False,
                                                      parent_id=tab.messages[-1]["id"])
        tab.set_versions(store.versions(tab.chat_id))
        tab.show_context(len(handle.request.prompt_ids), window.engine.context_length)
        if sum(m["role"] == "user" for m in messages) == 1:
            window.retitle(tab, title_from(messages[-1]["content"]))
        self._title_of[handle.request_id] = tab.title
        self._chat_of[handle.request_id] = tab.chat_id
        if tab.answer_message_id is not None:
            self._answer_of[handle.request_id] = tab.answer_message_id

    def _on_thinking(self, request_id: str, text: str) -> None:
        tab = self._tab_of.get(request_id)
        if tab is not None:
            tab.append_reasoning(text)

    def _on_tokens(self, request_id: str, text: str) -> None:
        tab = self._tab_of.get(request_id)
        if tab is not None:
            tab.append_text(text)

    def _on_finished(self, finished) -> None:
        window = self._window
        dock = window.scheduler
        outcome = dock.ledger.finished(finished.request_id, finished.reason, finished.e2e_s,
                                       finished.time, finished.lanes, dock.gpu_lanes)
        note = note_for(outcome, dock.ledger.summary(finished.time).median_error,
                        dock.ledger.baseline) \
            if outcome else ""
        dock.timeline.finished(finished.request_id, finished.reason, finished.time, note)
        dock.timeline_view.refresh()
        if outcome is not None:
            dock.add_decision(finished.time, self.label(finished), "done",
                              " → ".join(lane for _, lane in finished.lanes), note,
                              finished.request_id)
            dock.show_hybrid_summary()
        tab = self._tab_of.pop(finished.request_id, None)
        if tab is None:
            return
        answer_id = tab.answer_message_id
        tab.finish(finished)
        tab_badges.finished(window, tab)
        last = tab.messages[-1] if tab.messages else {}
        if window.engine is not None:
            tab.show_context(finished.prompt_tokens + finished.output_tokens,
                             window.engine.context_length)
        tab.answer_message_id = None
        if answer_id is not None:
            answered = last.get("role") == "assistant"
            text = last["content"] if answered else ""
            window.store.update_message(answer_id, text, complete=True,
                                        reasoning=last.get("reasoning", "") if answered else "",
                                        stats={
                "thinking_s": last.get("thinking_s") if answered else None,
                "footer": format_footer(finished), "reason": finished.reason,
                "lanes": finished.lanes, "output_tokens": finished.output_tokens,
                "cached_tokens": finished.cached_tokens, "ttft_s": finished.ttft_s,
                "prompt_tokens": finished.prompt_tokens,
                "format": last.get("format") if answered else None})

    # ---- the Scheduler dock ---------------------------------------------------------
    def _on_routed(self, event) -> None:
        dock = self._window.scheduler
        if event.phase == "prefill":
            dock.ledger.routed(event.request_id, event.predicted_done_s, event.predicted_s,
                               dock.gpu_lanes)
        dock.timeline.routed(event.request_id, self.label(event) or event.request_id,
                             event.phase, event.lane, event.time, event.reason,
                             row=event.tab_id or event.request_id)
        dock.timeline_view.refresh()
        dock.add_decision(event.time, self.label(event), event.phase, event.lane,
                          event.reason, event.request_id)

    def _on_queued(self, event) -> None:
        if event.reason:  # it waits for room (KV memory), not just its turn
            self._window.scheduler.add_decision(event.time, self.label(event), "wait", "",
                                                event.reason, event.request_id)

    def _on_migrated(self, event) -> None:
        dock = self._window.scheduler
        dock.timeline.migrated(event.request_id, event.to_lane, event.time, event.reason)
        dock.add_decision(event.time, self.label(event), "move",
                          f"{event.from_lane} -> {event.to_lane}", event.reason,
                          event.request_id)

    def _bring_forward(self, request_id: str) -> None:
        """A request picked in the dock: its chat comes forward at its answer."""
        chat_id = self._chat_of.get(request_id)
        if chat_id is not None:
            try:
                tab = self._window.open_chat(chat_id)
            except KeyError:  # the chat was deleted since
                return
            answer = self._answer_of.get(request_id)
            if answer is not None and not tab.is_streaming:
                tab.scroll_to(answer)
