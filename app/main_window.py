"""The main window: chat tabs and a status bar with the model, mode and devices.

The engine is loaded on a worker thread so the window appears at once; all
engine events arrive through the `EngineBridge` as Qt signals.
"""

from __future__ import annotations

import sys
import threading

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QApplication, QLabel, QMainWindow, QTabWidget

from engine import Engine, EngineError, SamplingParams

from .bridge import EngineBridge
from .chat_tab import ChatTab


class _Loader(QObject):
    """Carries the result of a background model load to the GUI thread."""

    loaded = Signal(object)
    failed = Signal(str)


class MainWindow(QMainWindow):
    engine_ready = Signal()

    def __init__(self, model: str = "default", engine_factory=None):
        super().__init__()
        self.setWindowTitle("Tandem")
        self.resize(1000, 720)
        self.engine: Engine | None = None
        self._engine_factory = engine_factory or (lambda source: Engine.load(source))
        self._tab_of_request: dict[str, ChatTab] = {}
        self.bridge = EngineBridge(self)
        self.bridge.tokens.connect(self._on_tokens)
        self.bridge.finished.connect(self._on_finished)
        self.bridge.error.connect(lambda m: self.statusBar().showMessage(m, 10_000))

        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.setCentralWidget(self.tabs)
        self.model_label = QLabel("Loading model…")
        self.device_label = QLabel("")
        self.mode_label = QLabel("")
        for label in (self.model_label, self.mode_label, self.device_label):
            self.statusBar().addPermanentWidget(label)
        self.new_chat()

        self._loader = _Loader(self)
        self._loader.loaded.connect(self._on_engine_loaded)
        self._loader.failed.connect(self._on_engine_failed)
        self.load_model(model)

    # ---- model ------------------------------------------------------------
    def load_model(self, source: str) -> None:
        self.model_label.setText(f"Loading {source}…")

        def work():
            try:
                engine = self._engine_factory(source)
            except EngineError as e:
                self._loader.failed.emit(str(e))
            except Exception as e:  # keep the window alive whatever happens
                self._loader.failed.emit(f"{type(e).__name__}: {e}")
            else:
                self._loader.loaded.emit(engine)

        threading.Thread(target=work, name="model-loader", daemon=True).start()

    def _on_engine_loaded(self, engine: Engine) -> None:
        if self.engine is not None:
            self.bridge.detach()
            self.engine.close()
        self.engine = engine
        self.bridge.attach(engine)
        self.model_label.setText(engine.model_info.label)
        devices = ", ".join(f"{lane.name}: {lane.device.upper()}" for lane in engine.lanes.values())
        self.device_label.setText(devices)
        self.mode_label.setText(engine.mode)
        for tab in self.chat_tabs():
            tab.set_ready(True)
        self.engine_ready.emit()

    def _on_engine_failed(self, message: str) -> None:
        self.model_label.setText("No model")
        self.statusBar().showMessage(f"Could not load the model: {message}")

    # ---- chats ------------------------------------------------------------
    def chat_tabs(self) -> list[ChatTab]:
        return [self.tabs.widget(i) for i in range(self.tabs.count())]

    def new_chat(self) -> ChatTab:
        tab = ChatTab(f"Chat {self.tabs.count() + 1}")
        tab.send_requested.connect(lambda messages, t=tab: self._submit(t, messages))
        tab.stop_requested.connect(lambda t=tab: self._stop(t))
        tab.set_ready(self.engine is not None)
        self.tabs.addTab(tab, tab.title)
        self.tabs.setCurrentWidget(tab)
        return tab

    def _submit(self, tab: ChatTab, messages: list[dict[str, str]]) -> None:
        if self.engine is None:
            tab.fail("The model is still loading.")
            return
        try:
            handle = self.engine.submit(messages, SamplingParams(max_tokens=1024),
                                        tab_id=str(id(tab)))
        except EngineError as e:
            tab.fail(str(e))
            return
        tab.request_id = handle.request_id
        self._tab_of_request[handle.request_id] = tab

    def _stop(self, tab: ChatTab) -> None:
        if self.engine is not None and tab.request_id:
            self.engine.cancel(tab.request_id)

    def _on_tokens(self, request_id: str, text: str) -> None:
        tab = self._tab_of_request.get(request_id)
        if tab is not None:
            tab.append_text(text)

    def _on_finished(self, finished) -> None:
        tab = self._tab_of_request.pop(finished.request_id, None)
        if tab is not None:
            tab.finish(finished)

    def closeEvent(self, event):  # noqa: N802
        self.bridge.detach()
        if self.engine is not None:
            self.engine.close()
            self.engine = None
        super().closeEvent(event)


def run_gui(model: str = "default") -> int:
    app = QApplication.instance() or QApplication(sys.argv)
    app.setApplicationName("Tandem")
    window = MainWindow(model)
    window.show()
    return app.exec()
