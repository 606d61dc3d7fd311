"""The main window: chat tabs and a status bar with the model, mode and devices.

The engine is loaded on a worker thread so the window appears at once; all
engine events arrive through the `EngineBridge` as Qt signals.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QDockWidget, QMainWindow

from app.chat import tab_badges
from app.chat.chat_files import ChatImporter, write_export
from app.chat.chat_requests import ChatRequests
from app.chat.chat_tab import ChatTab
from app.connections.local_server import LocalServer
from app.connections.remote_lanes import (RemoteLanesDialog, apply_remotes,
                                          open_remote_lanes, remote_model_spec)
from app.conversation.conversation import Conversation
from app.conversation.history import History, load_history
from app.conversation.saving import save_progress
from app.models.bridge import EngineBridge
from app.models.engine_session import EngineSession
from app.scheduler.request_feed import RequestFeed
from app.scheduler.scheduler_dock import SchedulerDock
from app.store import ChatStore
from app.ui.paths import default_db_path
from app.ui.plain_text import tip
from app.window.docks import add_dock, chat_tab_bar
from app.window.layout_state import restore_layout, restore_tabs, save_layout, save_tabs
from app.window.menus import Menus
from app.window.sidebar import ChatSidebar
from app.window.status_bar import StatusBar, can_hybrid, local_mode

if TYPE_CHECKING:
    from engine import EngineAPI

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
        self.bridge = EngineBridge(self)
        self.bridge.error.connect(lambda m: self.statusBar().showMessage(m, 10_000))
        self.status = StatusBar(self.store, self)
        self.setStatusBar(self.status)
        self._build_chats()
        self._build_scheduler()
        self.session = EngineSession(self.store, self.bridge, engine_factory, fallback_model,
                                     remote_spec=lambda name: remote_model_spec(self.store, name),
                                     apply_remotes=lambda e: apply_remotes(self.store, e),
                                     parent=self)
        restore_tabs(self)
        self.menus = Menus(self)
        restore_layout(self)
        self._flush_timer = QTimer(self)
        self._flush_timer.setInterval(FLUSH_EVERY_MS)
        self._flush_timer.timeout.connect(self.flush_streaming)
        self._flush_timer.start()
        self.server = LocalServer(self, store=self.store)
        self.server.state_changed.connect(self.status.server_label.setText)
        self._follow_session()
        self.load_model(model)

    def _build_chats(self) -> None:
        """The chat tabs, the Chats dock (the list of chats), and what runs
        the tabs' requests and imports."""
        self.tabs = chat_tab_bar()
        self.tabs.tabCloseRequested.connect(lambda i: self.close_tab(self.tabs.widget(i)))
        self.setCentralWidget(self.tabs)
        self.sidebar = ChatSidebar(self.store)
        self.sidebar.setMinimumWidth(200)  # room for the search field and the titles
        self.sidebar.open_requested.connect(self.open_chat)
        self.sidebar.new_requested.connect(self.new_chat)
        self.sidebar.deleted.connect(self._on_chat_deleted)
        self.chats_dock = add_dock(self, "Chats", "chats", self.sidebar, Qt.LeftDockWidgetArea,
                                   QDockWidget.DockWidgetMovable)
        self.requests = ChatRequests(self)
        self.importer = ChatImporter(self)
        tab_badges.install(self)

    def _build_scheduler(self) -> None:
        """The Scheduler dock, fed by the engine's events."""
        self.scheduler = SchedulerDock()
        self.scheduler.mode_requested.connect(self.set_mode)
        self.scheduler_dock = add_dock(self, "Scheduler", "scheduler", self.scheduler,
                                       Qt.RightDockWidgetArea)
        self.resizeDocks([self.chats_dock, self.scheduler_dock], [220, 460], Qt.Horizontal)
        self.bridge.lane_sample.connect(self.scheduler.on_lane_sample)
        self.bridge.lane_failed.connect(self.scheduler.show_lane_failed)
        RequestFeed(self.scheduler, self.bridge, self.requests.label)
        self.requests.rounds.waited.connect(self.scheduler.tool_waited)
        self.scheduler.request_selected.connect(self.requests.bring_forward)

    def _follow_session(self) -> None:
        """The status bar and the window follow the engine's loads."""
        status, session = self.status, self.session
        self.bridge.lane_sample.connect(
            lambda _: status.is_loading() and status.show_lanes_starting(self.engine))
        session.loading.connect(status.show_loading)
        session.loaded.connect(self.show_engine)
        session.failed.connect(self._on_model_failed)
        session.notice.connect(status.showMessage)
        session.closed.connect(lambda _: status.show_lanes_starting(self.engine))

    @property
    def engine(self) -> EngineAPI | None:
        """The engine in use (None until a model loads)."""
        return self.session.engine

    def load_model(self, source: str) -> None:
        self.session.load(source)

    def show_engine(self, engine: EngineAPI) -> None:
        """A newly loaded engine is the window's now: say so everywhere."""
        why = self.server.on_engine(engine)  # the API follows the window's model
        if why:
            self.statusBar().showMessage(f"Local server not started: {why}", 10_000)
        self.menus.server_action.setChecked(self.server.running)
        self.status.show_model(engine.model_info.label)
        self.status.show_lanes_starting(engine)
        self.show_lanes(engine)
        for tab in self.chat_tabs():
            tab.use_engine(engine)
            tab.apply_model_defaults(engine.generation_defaults.as_dict())
        self.engine_ready.emit()

    def show_lanes(self, engine: EngineAPI) -> None:
        """The engine's lanes changed (remote lanes added or removed)."""
        if engine is not None and engine is self.engine:
            self.scheduler.show_engine(engine)
            self.status.show_engine_lanes(engine)
            self.menus.allow_mode_toggle(can_hybrid(engine))

    def open_remote_lanes(self) -> RemoteLanesDialog:
        """Engine > Remote lanes…: the window shows the lanes it applies."""
        return open_remote_lanes(self, self.show_lanes)

    def _on_model_failed(self, message: str) -> None:
        """The previous engine (if any) stays: the status bar says which."""
        engine = self.engine
        self.status.show_model(engine.model_info.label if engine is not None else "No model")
        self.status.show_lanes_starting(engine)
        self.model_failed.emit(message)

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
        tab = ChatTab(chat.title, chat_id=chat_id, conversation=Conversation(
            history.messages, history.footers, history.versions, history.context_used))
        tab.apply_settings(chat.system_prompt, chat.params)
        if self.engine is not None:
            tab.apply_model_defaults(self.engine.generation_defaults.as_dict())
        self.requests.adopt(tab)  # its sends, stops, files, settings and ‹ ›
        tab.use_engine(self.engine)
        self.tabs.setTabToolTip(self.tabs.addTab(tab, tab.title), tip(tab.title))
        self.tabs.setCurrentWidget(tab)
        tab.composer.setFocus()  # typing goes to the new chat at once
        self._save_tabs()
        return tab

    def close_tab(self, tab: ChatTab) -> None:
        """Close a tab: its answer is stopped and kept as far as it got."""
        request_id = tab.conversation.request_id
        if tab.is_streaming and self.engine is not None and request_id:
            self.engine.cancel(request_id)
            self.flush_streaming()
        self.requests.forget(tab)
        self.tabs.removeTab(self.tabs.indexOf(tab))
        tab.deleteLater()
        self._save_tabs()

    def model_library(self, **kwargs):
        """The model library dialog (app/models), against this window's engine."""
        return self.session.library(self, **kwargs)

    def download_model(self, repo_id: str, **hub) -> None:
        """Download a Hugging Face repo with a progress bar and Cancel, then load
        it. `hub`: endpoint / cache_dir, huggingface_hub's own by default."""
        self.session.download(repo_id, self, **hub)

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
            save_progress(self.store, tab.conversation)

    def _save_tabs(self) -> None:
        self.scheduler.set_open_chats(self.tabs.count())
        save_tabs(self)

    def _on_chat_deleted(self, chat_id: int) -> None:
        for tab in [tab for tab in self.chat_tabs() if tab.chat_id == chat_id]:
            self.close_tab(tab)
        self.session.forget_chat_kv(chat_id)  # its KV on disk, unless another chat shares it
        if not self.chat_tabs():
            self.new_chat()

    def set_mode(self, mode: str) -> None:
        """Switch GPU-only / hybrid; running requests finish where they are
        unless the router moves them."""
        if self.engine is None:
            return
        mode = self.session.set_mode(mode)
        self.status.show_mode(mode, self.engine)
        self.scheduler.show_mode(mode)

    def toggle_server(self, on: bool | None = None) -> None:
        """The Local server: the OpenAI-compatible API on this window's engine."""
        on = self.menus.server_action.isChecked() if on is None else on
        if on and self.engine is not None:
            why = self.server.start(self.engine)
            if why:
                self.statusBar().showMessage(f"Local server not started: {why}", 10_000)
                on = False
        elif not on:
            self.server.stop()
        self.menus.server_action.setChecked(on and self.server.running)

    def wait_for_engines(self, timeout: float = 30.0) -> None:
        """Wait for models still loading and engines being closed in the
        background (at exit), so no MLX work is left when the process ends."""
        self.session.wait(timeout)

    def request_quit(self) -> None:
        """Quit, as the user asked (the menu, Ctrl+Q): busy work is asked about."""
        self._quitting = True
        self.close()

    def closeEvent(self, event):  # noqa: N802
        if getattr(self, "_closed", False):  # closed already: its state was saved then
            return super().closeEvent(event)
        self.flush_streaming()
        asked, self._quitting = event.spontaneous() or getattr(self, "_quitting", False), False
        streaming = sum(tab.is_streaming for tab in self.chat_tabs())
        saving = self.status.saving
        if (asked and not saving.confirm_busy(self, streaming, self.server.running)) or \
                not saving.confirm_quit(self):  # the user stays
            event.ignore()
            return
        self.server.stop()
        self._save_tabs()
        save_layout(self)
        saving.detach()  # this window is going; the store may outlive it
        self.bridge.detach()
        self.requests.rounds.close()  # stdio tool servers end with the app
        self.session.shut()
        self._closed = True
        super().closeEvent(event)

