"""The app's "Local server": `tandem serve`'s API on the window's engine, so
editors and scripts share the engine (and the Scheduler dock) with the tabs.
Off until the user turns it on; localhost only."""

from __future__ import annotations

import socket
import threading

from PySide6.QtCore import QObject, Signal

DEFAULT_PORT = 8080


class LocalServer(QObject):
    """uvicorn on a worker thread; `state_changed(text)` says where it listens."""

    state_changed = Signal(str)

    def __init__(self, parent: QObject | None = None, port: int = DEFAULT_PORT):
        super().__init__(parent)
        self.port = port
        self._server = None
        self._thread: threading.Thread | None = None
        self.engine = None

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self, engine) -> str | None:
        """Serve `engine`; returns why it could not start (None: it did)."""
        import uvicorn

        from server.api import ServerConfig, make_app

        self.stop()
        with socket.socket() as probe:  # a clear message, not a thread dying on bind
            try:
                probe.bind(("127.0.0.1", self.port))
            except OSError as e:
                return f"Port {self.port} is in use ({e.strerror})."
        app = make_app(engine, ServerConfig())
        model_id = app.state.ids[0]
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server, self.engine = uvicorn.Server(config), engine
        self._thread = threading.Thread(target=self._server.run, name="local-server",
                                        daemon=True)
        self._thread.start()
        self.state_changed.emit(f"API on 127.0.0.1:{self.port} (model '{model_id}')")
        return None

    def stop(self, timeout: float = 10.0) -> None:
        if self._server is None:
            return
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self._server, self._thread, self.engine = None, None, None
        self.state_changed.emit("")
