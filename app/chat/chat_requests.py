"""A chat tab's request, from Send to the saved answer: the prompt is
tokenised off the GUI thread, submitted to the window's engine, streamed into
its tab and saved (app/conversation/saving.py); Stop and closed tabs cancel
it. `label(event)` names each request (its tab's title, or the API client)
for the Scheduler dock, which app/scheduler/request_feed.py feeds."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QMainWindow

from engine import EngineError, SamplingParams

from app.chat import tab_badges
from app.chat.attachment_bar import AttachmentLoader
from app.chat.chat_history import show_version
from app.chat.chat_tab import ChatTab
from app.chat.prompt_prep import PromptPreparer
from app.chat.tool_rounds import ToolRounds
from app.conversation.saving import save_answer, save_question


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
        self.rounds = ToolRounds(self, window)  # tool calls and their servers (issue 36)
        bridge = window.bridge
        bridge.tokens.connect(self._on_tokens)
        bridge.drafted.connect(self._on_drafted)
        bridge.thinking.connect(self._on_thinking)
        bridge.finished.connect(self._on_finished)

    def adopt(self, tab: ChatTab) -> None:
        """A new tab of the window: its sends, stops and files come here, its
        settings go to the store, ‹ › shows another branch."""
        window = self._window
        # A chat's "Drafts: with <model>": the library's models that can
        # draft for the engine's (app/models/draft_models.py, the session's).
        tab.settings_row.set_draft_models(window.session.drafts.choices)
        tab.send_requested.connect(lambda messages, t=tab: self.submit(t, messages))
        tab.stop_requested.connect(lambda t=tab: self.stop(t))
        tab.attach_requested.connect(lambda paths, t=tab: self.attach(t, paths))
        tab.image_requested.connect(lambda name, data, t=tab: self.attach_image(t, name, data))
        tab.set_image_store(window.store)  # its images' thumbnails and bytes
        tab.version_requested.connect(lambda message_id, t=tab: show_version(window, t,
                                                                             message_id))
        tab.settings_changed.connect(lambda t=tab: window.store.update_chat(
            t.chat_id, system_prompt=t.system_prompt.text().strip(),
            params=t.stored_settings()))
        tab.model_defaults_requested.connect(lambda t=tab: window.engine is not None and (
            t.apply_model_defaults(window.engine.generation_defaults.as_dict())))
        self.rounds.adopt(tab)  # its Tools button and the approvals it asks

    def submit(self, tab: ChatTab, messages: list[dict], next_round: bool = False) -> None:
        """Prepare and start the tab's request (`next_round`: the answer goes
        on after its tool calls' results)."""
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
        tools, tool_choice = self.rounds.offer(tab, next_round)
        self._preparer.start(tab, engine, messages, tab.conversation.continue_from, grammar,
                             tools, tool_choice, next_round=next_round,
                             images=self._image_bytes(tab, messages))

    def _image_bytes(self, tab: ChatTab, messages: list[dict]) -> dict[str, bytes | None]:
        """The bytes of the prompt's images, by digest: the question just
        attached has them, the chat's earlier ones are in the store (read
        here: the store is the GUI thread's; decoding is the preparer's)."""
        fresh = {i.digest: i.data for i in tab.conversation.sending_images if i.data}
        wanted = {r["digest"] for m in messages for r in m.get("images") or ()}
        return {d: fresh.get(d) or self._window.store.image_data(d) for d in wanted}

    def attach_image(self, tab: ChatTab, name: str, data: bytes) -> None:
        """An image pasted or dropped as data: checked off the GUI thread."""
        tab.attachment_bar.pending += 1
        self._loader.load_image(tab, name, data)

    def attach(self, tab: ChatTab, paths: list[str]) -> None:
        """Read files for `tab` off the GUI thread and count their tokens with
        the model's tokenizer (a rough count while no model is loaded)."""
        engine = self._window.engine
        count = engine.count_tokens if engine is not None else (lambda text: len(text) // 3)
        for path in paths:
            tab.attachment_bar.pending += 1
            self._loader.load(tab, path, count)

    def _attached(self, tab: ChatTab, attachment) -> None:
        if tab in self._window.chat_tabs():  # not closed meanwhile
            tab.attached(attachment)

    def stop(self, tab: ChatTab) -> None:
        engine = self._window.engine
        if self.rounds.active(tab):  # a tool call asked about or running
            self.rounds.stop(tab)
        elif self._preparer.cancel(tab):  # still being tokenised: it never started
            tab.fail("Stopped before it started.")
        elif engine is not None and tab.conversation.request_id:
            engine.cancel(tab.conversation.request_id)

    def forget(self, tab: ChatTab) -> None:
        """The tab is closing: nothing more streams into it."""
        self._preparer.cancel(tab)
        self.rounds.forget(tab)
        self._tab_of = {r: t for r, t in self._tab_of.items() if t is not tab}

    def label(self, event) -> str:
        """Who a request is for: its tab's title, or the API client."""
        title = self._title_of.get(event.request_id)
        if title is None and (event.tab_id or "").startswith("api:"):
            who, sep, endpoint = event.tab_id[4:].rpartition(" /v1/")
            return f"API {who} · /v1/{endpoint}" if sep else f"API {event.tab_id[4:]}"
        return title or ""

    # ---- the request's life ------------------------------------------------------
    def _start(self, job, prepared) -> None:
        window, tab, messages = self._window, job.tab, job.messages
        if job.engine is not window.engine:  # another model was loaded meanwhile
            self.submit(tab, tab.prompt_messages() if job.next_round else messages,
                        next_round=job.next_round)
            return
        try:
            if isinstance(prepared, EngineError):
                if self.rounds.spelled(job, prepared):  # tool turns as plain text, again
                    self._preparer.start(tab, job.engine, self.rounds.flat(tab), job.prefix,
                                         job.grammar, job.tools, job.tool_choice, flat=True,
                                         next_round=job.next_round, images=job.images)
                    return
                raise prepared
            try:  # JSON asked for in the chat's settings: held to it token by token
                grammar = tab.settings_row.grammar()
            except ValueError as e:
                raise EngineError(str(e), "bad-argument") from None
            params = SamplingParams(**tab.settings(), **tab.settings_row.request_extras(),
                                    grammar=grammar)
            draft = tab.settings_row.draft_model()  # only a model the library lists loads
            drafts = window.session.drafts
            if draft and any(draft == source for source, _ in drafts.choices):
                drafts.ensure(window.engine, draft)
            handle = window.engine.submit(prepared, params, tab_id=str(tab.chat_id))
        except EngineError as e:
            tab.fail(str(e))
            return
        conversation = tab.conversation
        conversation.answer_format = "json" if grammar is not None else None
        conversation.request_id = handle.request_id
        self._tab_of[handle.request_id] = tab
        save_question(window.store, tab.chat_id, conversation)
        tab.set_versions(window.store.versions(tab.chat_id))
        tab.show_context(len(handle.request.prompt_ids), window.engine.context_length)
        if sum(m["role"] == "user" for m in messages) == 1 and messages[-1]["role"] == "user":
            window.retitle(tab, title_from(messages[-1]["content"]))
        self._title_of[handle.request_id] = tab.title
        self._chat_of[handle.request_id] = tab.chat_id
        if conversation.answer_message_id is not None:
            self._answer_of[handle.request_id] = conversation.answer_message_id

    def _on_thinking(self, request_id: str, text: str) -> None:
        tab = self._tab_of.get(request_id)
        if tab is not None:
            tab.append_reasoning(text)

    def _on_drafted(self, request_id: str, text: str) -> None:
        tab = self._tab_of.get(request_id)
        if tab is not None and tab.conversation.answer is not None:
            tab.conversation.answer.drafted.append(text)

    def _on_tokens(self, request_id: str, text: str) -> None:
        tab = self._tab_of.get(request_id)
        if tab is not None:
            tab.append_text(text)

    def _on_finished(self, finished) -> None:
        tab = self._tab_of.pop(finished.request_id, None)
        if tab is None:
            return
        window = self._window
        answer_id = tab.conversation.answer_message_id
        tab.finish(finished)
        tab_badges.finished(window, tab)
        if window.engine is not None:
            tab.show_context(finished.prompt_tokens + finished.output_tokens,
                             window.engine.context_length)
        save_answer(window.store, answer_id, tab.conversation, finished)
        self.rounds.after_answer(tab, finished)  # its tool calls, if it made any

    def bring_forward(self, request_id: str) -> None:
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
