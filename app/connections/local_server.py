"""The app's "Local server": `tandem serve`'s API on the window's engine, so
editors and scripts share the engine (and the Scheduler dock) with the tabs.
Off until the user turns it on (or asks for it to start with Tandem);
localhost only. Its port and switches are settings in the chat database;
its API key is in the OS keyring (app/connections/keys.py), never in the database."""

from __future__ import annotations

import socket
import threading
from dataclasses import asdict, dataclass

from PySide6.QtCore import QObject, Signal

from app.connections import keys
from app.connections.embedding_model import EmbeddingModelLoader

DEFAULT_PORT = 8080
KEY_NAME = "local-server-api-key"
SETTING = "local_server"


@dataclass
class ServerSettings:
    port: int = DEFAULT_PORT
    require_key: bool = False  # clients send `Authorization: Bearer <key>`
    start_with_tandem: bool = False
    embedding_model: str = ""  # a folder or repo id for /v1/embeddings ("": none)
    image_urls: bool = False  # fetch http(s) image URLs in requests (server/image_urls.py)

    @classmethod
    def load(cls, store) -> ServerSettings:
        saved = store.setting(SETTING) if store is not None else None
        settings = cls()
        if isinstance(saved, dict):
            port = saved.get("port")
            if isinstance(port, int) and 1024 <= port <= 65535:
                settings.port = port
            settings.require_key = saved.get("require_key") is True
            settings.start_with_tandem = saved.get("start_with_tandem") is True
            settings.image_urls = saved.get("image_urls") is True
            model = saved.get("embedding_model")
            if isinstance(model, str) and len(model) <= 4096:
                settings.embedding_model = model
        return settings

    def save(self, store) -> None:
        store.set_setting(SETTING, asdict(self))


class LocalServer(QObject):
    """uvicorn on a worker thread; `state_changed(text)` says where it listens."""

    state_changed = Signal(str)

    def __init__(self, parent: QObject | None = None, port: int | None = None, store=None):
        super().__init__(parent)
        self.store = store
        self.settings = ServerSettings.load(store)
        if port is not None:
            self.settings.port = port
        self._server = None
        self._thread: threading.Thread | None = None
        self._autostarted = False
        self.engine = None
        # The embedding model, loaded beside each chat model (embedding_model.py).
        self.embedding = EmbeddingModelLoader(self)
        if parent is not None and hasattr(parent, "statusBar"):
            self.embedding.done.connect(lambda text: parent.statusBar().showMessage(text, 10_000))

    @property
    def port(self) -> int:
        return self.settings.port

    @port.setter
    def port(self, port: int) -> None:
        self.settings.port = port

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def api_key(self) -> str | None:
        """The key clients must send, when one is required."""
        return keys.get(KEY_NAME) if self.settings.require_key else None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def on_engine(self, engine) -> str | None:
        """A model is loaded: a running server serves it now, and "start with
        Tandem" starts the server once; the embedding model, if one is set,
        loads beside it. Returns why the server could not start."""
        self.embedding.load(engine, self.settings.embedding_model)
        if self.running or (self.settings.start_with_tandem and not self._autostarted):
            self._autostarted = True
            return self.start(engine)
        return None

    def start(self, engine) -> str | None:
        """Serve `engine`; returns why it could not start (None: it did)."""
        import uvicorn

        from server.api import ServerConfig, make_app
        from server.image_urls import ImageFetcher

        self.stop()
        if not engine.capabilities.renders_locally:
            return ("the loaded model runs on a remote server; the Local server serves "
                    "models loaded on this machine.")
        key = self.api_key
        if self.settings.require_key and not key:
            return ("it needs an API key and none is stored on this machine (no OS keyring "
                    "kept it): set one in Engine > Local server settings.")
        with socket.socket() as probe:  # a clear message, not a thread dying on bind
            try:
                probe.bind(("127.0.0.1", self.port))
            except OSError as e:
                return f"Port {self.port} is in use ({e.strerror})."
        app = make_app(engine, ServerConfig(
            api_key=key, image_urls=ImageFetcher() if self.settings.image_urls else None))
        model_id = app.state.ids[0]
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server, self.engine = uvicorn.Server(config), engine
        self._thread = threading.Thread(target=self._server.run, name="local-server",
                                        daemon=True)
        self._thread.start()
        self.state_changed.emit(f"API on 127.0.0.1:{self.port} (model '{model_id}'"
                                + (", key required)" if key else ")"))
        return None

    def stop(self, timeout: float = 10.0) -> None:
        if self._server is None:
            return
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self._server, self._thread, self.engine = None, None, None
        self.state_changed.emit("")
