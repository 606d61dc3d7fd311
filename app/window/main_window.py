"""The main window: chat tabs and a status bar with the model, mode and devices.

The engine is loaded on a worker thread so the window appears at once; all
engine events arrive through the `EngineBridge` as Qt signals.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QDockWidget, QMainWindow, QTabWidget

from app.chat import tab_badges
from app.models.bridge import EngineBridge
from app.chat.chat_files import write_export
from app.chat.chat_history import History, load_history, show_version
from app.chat.chat_requests import ChatRequests
from app.chat.chat_tab import ChatTab
from app.models.engine_session import EngineSession
from app.window.layout_state import restore_layout, save_layout
from app.connections.local_server import LocalServer
from app.window.menus import build_menus
from app.ui.paths import default_db_path
from app.ui.plain_text import tip
from app.scheduler.scheduler_dock import SchedulerDock
from app.window.sidebar import ChatSidebar
from app.window.status_bar import (build_status_bar, can_hybrid, local_mode, mode_text,
                         show_engine_lanes, show_lanes_starting)
from app.store import ChatStore

if TYPE_CHECKING:
    from engine import Engine

FLUSH_EVERY_MS = 1000  # a streaming answer reaches the database at least this often


class MainWindow(QMainWindow):
    engine_ready = Signal()
    model_failed = Signal(str)

    def __init__(self, model: str = "default", engine_factory=None,
                 store: ChatStore | None = None, fallback_model: str | None = None):
        """`fallback_model`: loaded instead when `model` (remembered from the
        last session, say) cannot load and nothing is loaded yet."""
        super().__init__()
        self.resize(1200, 760)
        self.store = store or ChatStore(default_db_path())
        self.setWindowTitle("Tandem (read-only)" if self.store.read_only else "Tandem")
        self.engine: Engine | None = None
        self.bridge = EngineBridge(self)
        self.bridge.error.connect(lambda m: self.statusBar().showMessage(m, 10_000))

        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.setTabsClosable(True)
        self.tabs.setMovable(True)
        self.tabs.setElideMode(Qt.ElideRight)  # titles shrink so every tab stays in view
        self.tabs.tabCloseRequested.connect(lambda i: self.close_tab(self.tabs.widget(i)))
        self.setCentralWidget(self.tabs)
        self.sidebar = ChatSidebar(self.store)
        self.sidebar.open_requested.connect(self.open_chat)
        self.sidebar.new_requested.connect(self.new_chat)
        self.sidebar.deleted.connect(self._on_chat_deleted)
        self.chats_dock = chats_dock = QDockWidget("Chats", self)
        chats_dock.setObjectName("chats")
        chats_dock.setWidget(self.sidebar)
        self.sidebar.setMinimumWidth(200)  # room for the search field and the titles
        chats_dock.setFeatures(QDockWidget.DockWidgetMovable)
        self.addDockWidget(Qt.LeftDockWidgetArea, chats_dock)
        self.scheduler = SchedulerDock()
        self.scheduler.mode_requested.connect(self.set_mode)
        self.scheduler_dock = scheduler_dock = QDockWidget("Scheduler", self)
        scheduler_dock.setObjectName("scheduler")
        scheduler_dock.setWidget(self.scheduler)
        self.addDockWidget(Qt.RightDockWidgetArea, scheduler_dock)
        self.resizeDocks([chats_dock, scheduler_dock], [220, 460], Qt.Horizontal)
        self.bridge.lane_sample.connect(self.scheduler.on_lane_sample)
        self.requests = ChatRequests(self)
        tab_badges.install(self)
        build_status_bar(self)
        self._restore_tabs()
        build_menus(self)
        restore_layout(self)
        self._flush_timer = QTimer(self)
        self._flush_timer.setInterval(FLUSH_EVERY_MS)
        self._flush_timer.timeout.connect(self.flush_streaming)
        self._flush_timer.start()

        self.server = LocalServer(self, store=self.store)
        self.server.state_changed.connect(self.server_label.setText)
        self.bridge.lane_failed.connect(self.scheduler.show_lane_failed)
        self.session = EngineSession(self, engine_factory, fallback_model)
        self.load_model(model)

    # ---- model ------------------------------------------------------------
    def load_model(self, source: str) -> None:
        self.session.load(source)

    def show_engine(self, engine: Engine) -> None:
        """A newly loaded engine is the window's now: say so everywhere."""
        why = self.server.on_engine(engine)  # the API follows the window's model
        if why:
            self.statusBar().showMessage(f"Local server not started: {why}", 10_000)
        self.server_action.setChecked(self.server.running)
        self.model_label.setText(engine.model_info.label)
        show_lanes_starting(self)
        show_engine_lanes(self, engine)
        self.scheduler.show_engine(engine)
        for tab in self.chat_tabs():
            tab.set_ready(True)
            tab.show_context(tab.context_used, engine.context_length)
            tab.apply_model_defaults(engine.generation_defaults.as_dict())
        self.engine_ready.emit()

    # ---- chats ------------------------------------------------------------
    def chat_tabs(self) -> list[ChatTab]:
        return [self.tabs.widget(i) for i in range(self.tabs.count())]

    def new_chat(self) -> ChatTab:
        chat = self.store.create_chat(f"Chat {len(self.store.chats()) + 1}")
        self.sidebar.refresh()
        return self.open_chat(chat.id)

    def open_chat(self, chat_id: int, history: History | None = None) -> ChatTab:
        """Bring the chat's tab forward, opening it from the database if needed
        (from `history` when it was read already: a large import's worker)."""
        for tab in self.chat_tabs():
            if tab.chat_id == chat_id:
                self.tabs.setCurrentWidget(tab)
                return tab
        chat = self.store.chat(chat_id)
        history = history or load_history(self.store, chat_id)
        tab = ChatTab(chat.title, chat_id=chat_id, messages=history.messages,
                      footers=history.footers, versions=history.versions)
        tab.apply_settings(chat.system_prompt, chat.params)
        if self.engine is not None:
            tab.apply_model_defaults(self.engine.generation_defaults.as_dict())
        tab.settings_changed.connect(lambda t=tab: self.store.update_chat(
            t.chat_id, system_prompt=t.system_prompt.text().strip(),
            params=t.stored_settings()))
        tab.model_defaults_requested.connect(lambda t=tab: self.engine is not None and (
            t.apply_model_defaults(self.engine.generation_defaults.as_dict())))
        tab.send_requested.connect(lambda messages, t=tab: self.requests.submit(t, messages))
        tab.stop_requested.connect(lambda t=tab: self.requests.stop(t))
        tab.attach_requested.connect(lambda paths, t=tab: self.requests.attach(t, paths))
        tab.version_requested.connect(lambda message_id, t=tab: show_version(self, t, message_id))
        tab.set_ready(self.engine is not None)
        tab.context_used = history.context_used
        if self.engine is not None:
            tab.show_context(tab.context_used, self.engine.context_length)
        self.tabs.setTabToolTip(self.tabs.addTab(tab, tab.title), tip(tab.title))
        self.tabs.setCurrentWidget(tab)
        tab.composer.setFocus()  # typing goes to the new chat at once
        self._save_tabs()
        return tab

    def close_tab(self, tab: ChatTab) -> None:
        """Close a tab: its answer is stopped and kept as far as it got."""
        if tab.is_streaming and self.engine is not None and tab.request_id:
            self.engine.cancel(tab.request_id)
            self.flush_streaming()
        self.requests.forget(tab)
        self.tabs.removeTab(self.tabs.indexOf(tab))
        tab.deleteLater()
        self._save_tabs()

    def model_library(self, **kwargs):
        from app.models.model_library import library_for

        return library_for(self, **kwargs)

    def pick_model(self) -> None:
        self.model_library().exec()

    def download_model(self, repo_id: str, **hub) -> None:
        """Download a Hugging Face repo with a progress bar and Cancel, then load
        it. `hub`: endpoint / cache_dir, huggingface_hub's own by default."""
        from app.models.download import start_download

        self._download = start_download(self, repo_id, on_done=self.load_model,
                                        on_failed=self.session.fail, **hub)

    def current_tab(self) -> ChatTab | None:
        return self.tabs.currentWidget()

    def stop(self, tab: ChatTab) -> None:
        """Stop the tab's answer (or its prompt, still being tokenised)."""
        self.requests.stop(tab)

    def retitle(self, tab: ChatTab, title: str) -> None:
        self.store.update_chat(tab.chat_id, title=title)
        tab.title = title
        self.tabs.setTabText(self.tabs.indexOf(tab), title)
        self.tabs.setTabToolTip(self.tabs.indexOf(tab), tip(title))
        self.sidebar.refresh()

    def toggle_mode(self) -> None:
        if self.engine is not None and can_hybrid(self.engine):
            local = local_mode(self.engine)
            self.set_mode("hybrid" if self.engine.mode == local else local)

    def export_chat(self, tab: ChatTab, path: str | Path) -> Path:
        """Write the chat as Markdown (as JSON when `path` ends in .json)."""
        return write_export(self.store, tab.chat_id, path)

    def flush_streaming(self) -> None:
        """Write every streaming answer's text so far (at least once a second)."""
        for tab in self.chat_tabs():
            if tab.is_streaming and tab.answer_message_id is not None:
                self.store.update_message(tab.answer_message_id, tab.streaming_text or "",
                                          reasoning=tab.streaming_reasoning)

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
        self.scheduler.set_open_chats(self.tabs.count())
        self.store.save_open_tabs([t.chat_id for t in self.chat_tabs()],
                                  current.chat_id if current is not None else None)

    def _on_chat_deleted(self, chat_id: int) -> None:
        for tab in self.chat_tabs():
            if tab.chat_id == chat_id:
                self.close_tab(tab)
        if not self.chat_tabs():
            self.new_chat()

    def set_mode(self, mode: str) -> None:
        """Switch GPU-only / hybrid; running requests finish where they are
        unless the router moves them."""
        if self.engine is None:
            return
        mode = self.session.set_mode(mode)
        self.mode_label.setText(mode_text(mode, self.engine))
        self.scheduler.show_mode(mode)

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
        self.session.wait(timeout)

    def request_quit(self) -> None:
        """Quit, as the user asked (the menu, Ctrl+Q): busy work is asked about."""
        self._quitting = True
        self.close()

    def closeEvent(self, event):  # noqa: N802
        self.flush_streaming()
        asked, self._quitting = event.spontaneous() or getattr(self, "_quitting", False), False
        streaming = sum(tab.is_streaming for tab in self.chat_tabs())
        if (asked and not self.saving.confirm_busy(self, streaming, self.server.running)) or \
                not self.saving.confirm_quit(self):  # the user stays
            event.ignore()
            return
        self.server.stop()
        self._save_tabs()
        save_layout(self)
        self.saving.detach()  # this window is going; the store may outlive it
        self.bridge.detach()
        self.session.shut()
        super().closeEvent(event)

