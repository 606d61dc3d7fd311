"""The window's engine over time: a model loads off the GUI thread and takes
over from the previous one, which closes off the GUI thread too; a model that
cannot load leaves the previous one in place, and a remembered model that is
gone falls back (once) to the bundled one. The last model and mode are kept
in the chat database for the next start."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QMainWindow

from engine import EngineError

from app.models.engine_loader import EngineCloser, EngineLoader, load_engine
from app.connections.remote_lanes import apply_remotes, remote_model_spec
from app.window.status_bar import show_lanes_starting, show_loading

if TYPE_CHECKING:
    from engine import Engine

LAST_MODEL_KEY, MODE_KEY = "model.last", "engine.mode"  # remembered across restarts


class EngineSession(QObject):
    """`load(source)`; the window hears of the result through `show_engine`
    and its `model_failed` signal. `closed(engine)`: an old engine is done."""

    closed = Signal(object)

    def __init__(self, window: QMainWindow, factory=None, fallback: str | None = None):
        super().__init__(window)
        self._window = window
        self._fallback = fallback
        self._requested: str | None = None
        self._closer = EngineCloser(self)
        self._closer.closed.connect(window.bridge.detach)
        self._closer.closed.connect(self.closed)
        self._factory = factory or load_engine
        self._remote_models: dict[str, tuple] = {}  # "remote:<name>" -> (spec, key)
        self._loader = EngineLoader(self._make, self)
        self._loader.loaded.connect(self._on_loaded)
        self._loader.failed.connect(self.fail)

    def load(self, source: str) -> None:
        """Load `source`: a model ('default', a file, a folder, a repo id) or
        "remote:<name>", a saved remote lane's model, run on its server."""
        self._requested = source
        if source.startswith("remote:"):
            found = remote_model_spec(self._window, source[len("remote:"):])
            if isinstance(found, str):
                self.fail(found)
                return
            self._remote_models[source] = found
        show_loading(self._window, f"Loading {source}…")
        self._loader.start(source)

    def _make(self, source: str):
        """On the loader thread: the engine for `source`."""
        if source in self._remote_models:
            from engine import RemoteModelEngine

            spec, key = self._remote_models[source]
            return RemoteModelEngine.load(spec, key)
        return self._factory(source)

    def set_mode(self, mode: str) -> str:
        """Switch the engine's mode and remember it; the mode it runs now
        (the old one, with the reason in the status bar, when it cannot)."""
        window, engine = self._window, self._window.engine
        try:
            engine.set_mode(mode)
            window.store.set_setting(MODE_KEY, mode)
        except EngineError as e:
            window.statusBar().showMessage(str(e), 10_000)
        return engine.mode

    def shut(self) -> None:
        """The window is closing: a model still loading is closed when it is
        loaded, and the current engine closes now (off the GUI thread)."""
        self._loader.closing = True
        window = self._window
        if window.engine is not None:
            self._closer.close(window.engine)
            window.engine = None

    def wait(self, timeout: float = 30.0) -> None:
        """Wait for models still loading and engines being closed (at exit),
        so no MLX work is left when the process ends."""
        from PySide6.QtCore import QCoreApplication

        self._loader.wait(timeout)
        QCoreApplication.processEvents()  # a load that finished just before the close
        self._closer.wait(timeout)

    def _on_loaded(self, engine: Engine) -> None:
        if self._loader.closing:  # loaded as the window closed: close it too
            self._closer.close(engine)
            return
        window = self._window
        old, window.engine = window.engine, engine
        window.store.set_setting(LAST_MODEL_KEY, engine.model_info.source)  # for the next start
        problems = apply_remotes(window, engine)  # the saved remote lanes (Engine menu)
        if problems:
            window.statusBar().showMessage(" ".join(problems), 15_000)
        mode = window.store.setting(MODE_KEY)
        if mode and mode != engine.mode:
            try:
                engine.set_mode(mode)
            except EngineError:  # this model or machine cannot run it: keep the default
                pass
        if old is not None:
            # Closed off the GUI thread and still observed until it is done,
            # so answers it was streaming end as "stopped" in their tabs.
            self._closer.close(old)
        window.bridge.attach(engine)
        window.show_engine(engine)

    def fail(self, message: str) -> None:
        """A model could not be had (its load or download failed); the
        previous one (if any) stays loaded and usable."""
        window = self._window
        fallback, self._fallback = self._fallback, None  # once
        if window.engine is None and fallback and self._requested != fallback:
            # The model remembered from last time is gone or broken: say so, and
            # start with the fallback (the bundled model) rather than with nothing.
            window.statusBar().showMessage(f"Could not load {self._requested}: {message}; "
                                           f"loading {fallback} instead.", 30_000)
            window.model_failed.emit(message)
            self.load(fallback)
            return
        window.model_label.setText(window.engine.model_info.label if window.engine else "No model")
        show_lanes_starting(window)  # the bar goes (or stays for the old engine's lanes)
        window.statusBar().showMessage(f"Could not load the model: {message}")
        window.model_failed.emit(message)
