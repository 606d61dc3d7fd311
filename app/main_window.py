"""The main window: chat tabs and a status bar with the model, mode and devices.

The engine is loaded on a worker thread so the window appears at once; all
engine events arrive through the `EngineBridge` as Qt signals.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (QDockWidget, QFileDialog, QLabel, QMainWindow,
                               QTabWidget)

from engine.runtime.blas import openblas_advice
from engine.core.errors import EngineError
from engine.core.params import SamplingParams

from .bridge import EngineBridge
from .chat_tab import ChatTab, format_footer
from .engine_loader import EngineCloser, EngineLoader, load_engine
from .menus import build_menus
from .paths import default_db_path
from .local_server import LocalServer
from .prompt_prep import PromptPreparer
from .saving_status import SavingStatus
from .scheduler_dock import SchedulerDock
from .sidebar import ChatSidebar
from .store import ChatStore

if TYPE_CHECKING:
    from engine import Engine

FLUSH_EVERY_MS = 1000  # a streaming answer reaches the database at least this often
LAST_MODEL_KEY, MODE_KEY = "model.last", "engine.mode"  # remembered across restarts
MODE_TEXT = {"gpu-only": "GPU only", "hybrid": "Hybrid: GPU + CPU", "cpu-only": "CPU only"}


def mode_text(mode: str) -> str:
    return MODE_TEXT.get(mode, mode)


class MainWindow(QMainWindow):
    engine_ready = Signal()
    model_failed = Signal(str)

    def __init__(self, model: str = "default", engine_factory=None,
                 store: ChatStore | None = None, fallback_model: str | None = None):
        """`fallback_model`: loaded instead when `model` (remembered from the
        last session, say) cannot load and nothing is loaded yet."""
        super().__init__()
        self.resize(1200, 760)
        self._fallback = fallback_model
        self.store = store or ChatStore(default_db_path())
        self.setWindowTitle("Tandem (read-only)" if self.store.read_only else "Tandem")
        self.engine: Engine | None = None
        self._tab_of_request: dict[str, ChatTab] = {}
        self._preparer = PromptPreparer(self)
        self._preparer.ready.connect(self._start_request)
        self.bridge = EngineBridge(self)
        self.bridge.tokens.connect(self._on_tokens)
        self.bridge.finished.connect(self._on_finished)
        self.bridge.error.connect(lambda m: self.statusBar().showMessage(m, 10_000))

        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.setTabsClosable(True)
        self.tabs.setMovable(True)
        self.tabs.tabCloseRequested.connect(lambda i: self.close_tab(self.tabs.widget(i)))
        self.setCentralWidget(self.tabs)
        self.sidebar = ChatSidebar(self.store)
        self.sidebar.open_requested.connect(self.open_chat)
        self.sidebar.new_requested.connect(self.new_chat)
        self.sidebar.deleted.connect(self._on_chat_deleted)
        chats_dock = QDockWidget("Chats", self)
        chats_dock.setObjectName("chats")
        chats_dock.setWidget(self.sidebar)
        self.sidebar.setMinimumWidth(200)  # room for the search field and the titles
        chats_dock.setFeatures(QDockWidget.DockWidgetMovable)
        self.addDockWidget(Qt.LeftDockWidgetArea, chats_dock)
        self.scheduler = SchedulerDock()
        self.scheduler.mode_requested.connect(self.set_mode)
        self.scheduler.request_selected.connect(self._bring_request_forward)
        scheduler_dock = QDockWidget("Scheduler", self)
        scheduler_dock.setObjectName("scheduler")
        scheduler_dock.setWidget(self.scheduler)
        self.addDockWidget(Qt.RightDockWidgetArea, scheduler_dock)
        self.resizeDocks([chats_dock, scheduler_dock], [220, 460], Qt.Horizontal)
        self.bridge.lane_sample.connect(self.scheduler.on_lane_sample)
        self.bridge.routed.connect(self._on_routed)
        self.bridge.migrated.connect(self._on_migrated)
        self._tab_title_of_request: dict[str, str] = {}
        self._chat_of_request: dict[str, int] = {}
        self.model_label = QLabel("Loading model…")
        self.device_label = QLabel("")
        self.mode_label = QLabel("")
        for label in (self.model_label, self.mode_label, self.device_label):
            self.statusBar().addPermanentWidget(label)
        self.saving = SavingStatus(self.store, self.statusBar(), self)
        advice = openblas_advice()
        self.blas_label = QLabel("⚠ slow CPU maths: OpenBLAS missing" if advice else "")
        if advice:  # the app works without it, only about 50x slower: say so once
            self.blas_label.setToolTip(advice)
            self.statusBar().addPermanentWidget(self.blas_label)
            self.statusBar().showMessage(advice, 30_000)
        self._restore_tabs()
        self._build_menus()
        self._restore_layout()
        self._flush_timer = QTimer(self)
        self._flush_timer.setInterval(FLUSH_EVERY_MS)
        self._flush_timer.timeout.connect(self.flush_streaming)
        self._flush_timer.start()

        self.server = LocalServer(self)
        self.server_label = QLabel("")
        self.statusBar().addPermanentWidget(self.server_label)
        self.server.state_changed.connect(self.server_label.setText)
        self._closer = EngineCloser(self)
        self._closer.closed.connect(self.bridge.detach)
        self.bridge.lane_failed.connect(self.scheduler.show_lane_failed)
        self.bridge.queued.connect(self._on_queued)
        self._loader = EngineLoader(engine_factory or load_engine, self)
        self._loader.loaded.connect(self._on_engine_loaded)
        self._loader.failed.connect(self._on_engine_failed)
        self.load_model(model)

    # ---- model ------------------------------------------------------------
    def load_model(self, source: str) -> None:
        self._requested = source
        self.model_label.setText(f"Loading {source}…")
        self._loader.start(source)

    def _on_engine_loaded(self, engine: Engine) -> None:
        if self._loader.closing:  # loaded as the window closed: close it too
            self._closer.close(engine)
            return
        old, self.engine = self.engine, engine
        self.store.set_setting(LAST_MODEL_KEY, engine.model_info.source)  # for the next start
        mode = self.store.setting(MODE_KEY)
        if mode and mode != engine.mode:
            try:
                engine.set_mode(mode)
            except EngineError:  # this model or machine cannot run it: keep the default
                pass
        if old is not None:
            # Closed off the GUI thread and still observed until it is done,
            # so answers it was streaming end as "stopped" in their tabs.
            self._closer.close(old)
        self.bridge.attach(engine)
        if self.server.running:  # the API follows the window's model
            self.server.start(engine)
        self.model_label.setText(engine.model_info.label)
        devices = ", ".join(f"{lane.name}: {lane.device.upper()}" for lane in engine.lane_info())
        self.device_label.setText(devices)
        self.mode_label.setText(mode_text(engine.mode))
        self.scheduler.show_engine(engine)
        for tab in self.chat_tabs():
            tab.set_ready(True)
            tab.show_context(tab.context_used, engine.context_length)
        self.engine_ready.emit()

    def _on_engine_failed(self, message: str) -> None:
        # The previous model (if any) stays loaded and usable.
        fallback, self._fallback = self._fallback, None  # once
        if self.engine is None and fallback and self._requested != fallback:
            # The model remembered from last time is gone or broken: say so, and
            # start with the fallback (the bundled model) rather than with nothing.
            self.statusBar().showMessage(f"Could not load {self._requested}: {message}; "
                                         f"loading {fallback} instead.", 30_000)
            self.model_failed.emit(message)
            self.load_model(fallback)
            return
        self.model_label.setText(self.engine.model_info.label if self.engine else "No model")
        self.statusBar().showMessage(f"Could not load the model: {message}")
        self.model_failed.emit(message)

    # ---- chats ------------------------------------------------------------
    def chat_tabs(self) -> list[ChatTab]:
        return [self.tabs.widget(i) for i in range(self.tabs.count())]

    def new_chat(self) -> ChatTab:
        chat = self.store.create_chat(f"Chat {len(self.store.chats()) + 1}")
        self.sidebar.refresh()
        return self.open_chat(chat.id)

    def open_chat(self, chat_id: int) -> ChatTab:
        """Bring the chat's tab forward, opening it from the database if needed."""
        for tab in self.chat_tabs():
            if tab.chat_id == chat_id:
                self.tabs.setCurrentWidget(tab)
                return tab
        chat = self.store.chat(chat_id)
        stored = self.store.messages(chat_id)
        # An answer still marked incomplete was cut (the app was killed, or its
        # tab closed mid-stream): it shows as interrupted, with Continue.
        messages = [{"role": m.role, "content": m.content, "id": m.id,
                     "interrupted": m.role == "assistant" and not m.complete}
                    for m in stored]
        footers = {i: m.stats["footer"] for i, m in enumerate(stored)
                   if m.stats and m.stats.get("footer")}
        tab = ChatTab(chat.title, chat_id=chat_id, messages=messages, footers=footers)
        tab.apply_settings(chat.system_prompt, chat.params)
        tab.settings_changed.connect(lambda t=tab: self.store.update_chat(
            t.chat_id, system_prompt=t.system_prompt.text().strip(), params=t.settings()))
        tab.send_requested.connect(lambda messages, t=tab: self._submit(t, messages))
        tab.stop_requested.connect(lambda t=tab: self._stop(t))
        tab.truncated.connect(self.store.delete_messages_from)
        tab.set_ready(self.engine is not None)
        last = next((m.stats for m in reversed(stored) if m.stats), None) or {}
        tab.context_used = last.get("prompt_tokens", 0) + last.get("output_tokens", 0)
        if self.engine is not None:
            tab.show_context(tab.context_used, self.engine.context_length)
        self.tabs.addTab(tab, tab.title)
        self.tabs.setCurrentWidget(tab)
        tab.composer.setFocus()  # typing goes to the new chat at once
        self._save_tabs()
        return tab

    def close_tab(self, tab: ChatTab) -> None:
        """Close a tab: its answer is stopped and kept as far as it got."""
        if tab.is_streaming and self.engine is not None and tab.request_id:
            self.engine.cancel(tab.request_id)
            self.flush_streaming()
        self._preparer.cancel(tab)
        self._tab_of_request = {r: t for r, t in self._tab_of_request.items() if t is not tab}
        self.tabs.removeTab(self.tabs.indexOf(tab))
        tab.deleteLater()
        self._save_tabs()

    def _build_menus(self) -> None:
        build_menus(self)

    def model_library(self, **kwargs):
        from .model_library import library_for

        return library_for(self, **kwargs)

    def pick_model(self) -> None:
        self.model_library().exec()

    def download_model(self, repo_id: str, **hub) -> None:
        """Download a Hugging Face repo with a progress bar and Cancel, then load
        it. `hub`: endpoint / cache_dir, huggingface_hub's own by default."""
        from .download import start_download

        self._download = start_download(self, repo_id, on_done=self.load_model,
                                        on_failed=self._on_engine_failed, **hub)

    def current_tab(self) -> ChatTab | None:
        return self.tabs.currentWidget()

    def _close_current(self) -> None:
        if self.current_tab() is not None:
            self.close_tab(self.current_tab())
        if not self.chat_tabs():
            self.new_chat()

    def _stop_current(self) -> None:
        if self.current_tab() is not None:
            self._stop(self.current_tab())

    def _cycle_tab(self, step: int) -> None:
        if self.tabs.count():
            self.tabs.setCurrentIndex((self.tabs.currentIndex() + step) % self.tabs.count())

    def _export_current(self) -> None:
        tab = self.current_tab()
        if tab is None:
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export chat", f"{tab.title}.md",
                                              "Markdown (*.md)")
        if path:
            self.export_chat(tab, path)

    def toggle_mode(self) -> None:
        if self.engine is not None and any(lane.kind == "gpu" for lane in self.engine.lane_info()):
            self.set_mode("hybrid" if self.engine.mode == "gpu-only" else "gpu-only")

    def export_chat(self, tab: ChatTab, path: str | Path) -> Path:
        """Write the chat as Markdown."""
        path = Path(path)
        path.write_text(self.store.export_markdown(tab.chat_id), encoding="utf-8")
        return path

    def flush_streaming(self) -> None:
        """Write every streaming answer's text so far (at least once a second)."""
        for tab in self.chat_tabs():
            if tab.is_streaming and tab.answer_message_id is not None:
                self.store.update_message(tab.answer_message_id, tab.streaming_text or "")

    def _restore_tabs(self) -> None:
        ids, current = self.store.open_tabs()
        for chat_id in ids:
            try:
                self.open_chat(chat_id)
            except KeyError:
                continue
        if not self.chat_tabs():
            self.new_chat()
        elif current is not None:
            self.open_chat(current)

    def _save_tabs(self) -> None:
        current = self.tabs.currentWidget()
        self.store.save_open_tabs([t.chat_id for t in self.chat_tabs()],
                                  current.chat_id if current is not None else None)

    def _on_chat_deleted(self, chat_id: int) -> None:
        for tab in self.chat_tabs():
            if tab.chat_id == chat_id:
                self.close_tab(tab)
        if not self.chat_tabs():
            self.new_chat()

    def _submit(self, tab: ChatTab, messages: list[dict[str, str]]) -> None:
        if self.engine is None:
            tab.fail("The model is still loading.")
            return
        # Tokenising runs off the GUI thread; the request starts in _start_request.
        self._preparer.start(tab, self.engine, messages, tab.continue_from)

    def _start_request(self, job, prepared) -> None:
        tab, messages = job.tab, job.messages
        if job.engine is not self.engine:  # another model was loaded meanwhile
            self._submit(tab, messages)
            return
        try:
            if isinstance(prepared, EngineError):
                raise prepared
            settings = tab.settings()
            params = SamplingParams(max_tokens=settings["max_tokens"],
                                    temperature=settings["temperature"], top_p=settings["top_p"])
            handle = self.engine.submit(prompt_ids=prepared, params=params,
                                        tab_id=str(tab.chat_id))
        except EngineError as e:
            tab.fail(str(e))
            return
        tab.request_id = handle.request_id
        self._tab_of_request[handle.request_id] = tab
        if not tab.resend_without_user:
            tab.messages[-1]["id"] = self.store.add_message(tab.chat_id, "user",
                                                            messages[-1]["content"])
        tab.resend_without_user = False
        if tab.continue_from is None:
            tab.answer_message_id = self.store.add_message(tab.chat_id, "assistant", "",
                                                           complete=False)
        tab.show_context(len(handle.request.prompt_ids), self.engine.context_length)
        if sum(m["role"] == "user" for m in messages) == 1:
            title = " ".join(messages[-1]["content"].split())[:40]
            self.store.update_chat(tab.chat_id, title=title)
            tab.title = title
            self.tabs.setTabText(self.tabs.indexOf(tab), title)
            self.sidebar.refresh()
        self._tab_title_of_request[handle.request_id] = tab.title
        self._chat_of_request[handle.request_id] = tab.chat_id

    def set_mode(self, mode: str) -> None:
        """Switch GPU-only / hybrid; running requests finish where they are
        unless the router moves them."""
        if self.engine is None:
            return
        try:
            self.engine.set_mode(mode)
            self.store.set_setting(MODE_KEY, mode)
        except EngineError as e:
            self.statusBar().showMessage(str(e), 10_000)
            mode = self.engine.mode
        self.mode_label.setText(mode_text(mode))
        self.scheduler.show_mode(mode)

    def _label(self, event) -> str:
        """Who a request is for: its tab's title, or the API client."""
        title = self._tab_title_of_request.get(event.request_id)
        if title is None and (event.tab_id or "").startswith("api:"):
            return f"API {event.tab_id[4:]}"
        return title or ""

    def _on_routed(self, event) -> None:
        self.scheduler.timeline.routed(event.request_id, self._label(event) or event.request_id,
                                       event.phase, event.lane, event.time)
        self.scheduler.add_decision(event.time, self._label(event), event.phase, event.lane,
                                    event.reason, event.request_id)

    def toggle_server(self, on: bool | None = None) -> None:
        """The Local server: the OpenAI-compatible API on this window's engine."""
        on = self.server_action.isChecked() if on is None else on
        if on and self.engine is not None:
            why = self.server.start(self.engine)
            if why:
                self.statusBar().showMessage(f"Local server not started: {why}", 10_000)
                on = False
        elif not on:
            self.server.stop()
        self.server_action.setChecked(on and self.server.running)

    def wait_for_engines(self, timeout: float = 30.0) -> None:
        """Wait for models still loading and engines being closed in the
        background (at exit), so no MLX work is left when the process ends."""
        from PySide6.QtCore import QCoreApplication

        self._loader.wait(timeout)
        QCoreApplication.processEvents()  # a load that finished just before the close
        self._closer.wait(timeout)

    def _on_queued(self, event) -> None:
        if event.reason:  # it waits for room (KV memory), not just its turn
            self.scheduler.add_decision(event.time, self._label(event), "wait", "",
                                        event.reason, event.request_id)

    def _on_migrated(self, event) -> None:
        self.scheduler.timeline.migrated(event.request_id, event.to_lane, event.time)
        self.scheduler.add_decision(event.time, self._label(event), "move",
                                    f"{event.from_lane} -> {event.to_lane}", event.reason,
                                    event.request_id)

    def _bring_request_forward(self, request_id: str) -> None:
        chat_id = self._chat_of_request.get(request_id)
        if chat_id is not None:
            try:
                self.open_chat(chat_id)
            except KeyError:  # the chat was deleted since
                pass

    def _stop(self, tab: ChatTab) -> None:
        if self._preparer.cancel(tab):  # still being tokenised: it never started
            tab.fail("Stopped before it started.")
        elif self.engine is not None and tab.request_id:
            self.engine.cancel(tab.request_id)

    def _on_tokens(self, request_id: str, text: str) -> None:
        tab = self._tab_of_request.get(request_id)
        if tab is not None:
            tab.append_text(text)

    def _on_finished(self, finished) -> None:
        self.scheduler.timeline.finished(finished.request_id, finished.reason, finished.time)
        self.scheduler.timeline_view.refresh()
        tab = self._tab_of_request.pop(finished.request_id, None)
        if tab is not None:
            answer_id = tab.answer_message_id
            tab.finish(finished)
            if self.engine is not None:
                tab.show_context(finished.prompt_tokens + finished.output_tokens,
                                 self.engine.context_length)
            tab.answer_message_id = None
            if answer_id is not None:
                text = tab.messages[-1]["content"] if tab.messages[-1]["role"] == "assistant" else ""
                self.store.update_message(answer_id, text, complete=True, stats={
                    "footer": format_footer(finished), "reason": finished.reason,
                    "lanes": finished.lanes, "output_tokens": finished.output_tokens,
                    "cached_tokens": finished.cached_tokens, "ttft_s": finished.ttft_s,
                    "prompt_tokens": finished.prompt_tokens})

    def _restore_layout(self) -> None:
        from PySide6.QtCore import QByteArray

        geometry, state = self.store.setting("window.geometry"), self.store.setting("window.state")
        if geometry:
            self.restoreGeometry(QByteArray.fromBase64(geometry.encode()))
        if state:
            self.restoreState(QByteArray.fromBase64(state.encode()))

    def _save_layout(self) -> None:
        self.store.set_setting("window.geometry", bytes(self.saveGeometry().toBase64()).decode())
        self.store.set_setting("window.state", bytes(self.saveState().toBase64()).decode())

    def closeEvent(self, event):  # noqa: N802
        self._loader.closing = True
        self.server.stop()
        self.flush_streaming()
        self._save_tabs()
        self._save_layout()
        self.saving.detach()  # this window is going; the store may outlive it
        self.bridge.detach()
        if self.engine is not None:
            self._closer.close(self.engine)
            self.engine = None
        super().closeEvent(event)

