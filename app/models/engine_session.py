"""The window's engine over time: a model loads off the GUI thread and takes
over from the previous one, which closes off the GUI thread too; a model that
cannot load leaves the previous one in place, and a remembered model that is
gone falls back (once) to the bundled one. The last model and mode are kept
in the chat database for the next start."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from engine import EngineError

from app.models.draft_models import DraftModels
from app.models.engine_loader import (EngineCloser, EngineLoader, KVDisk, forget_chat_kv,
                                      kv_disk, load_engine)

if TYPE_CHECKING:
    from engine import EngineAPI

LAST_MODEL_KEY, MODE_KEY = "model.last", "engine.mode"  # remembered across restarts
NO_CHAT = ("{source} has no chat template: it is a base model, which continues text rather "
           "than answering chat messages, so it cannot chat here. Use it to continue text "
           "with `tandem generate --raw` or the API's /v1/completions (`tandem serve`).")


class EngineSession(QObject):
    """`load(source)`; `engine` is the engine in use (None until one loads).
    Signals: `loading(text)`, `loaded(engine)` (it is `engine` now),
    `failed(message)` (the previous engine stays), `notice(text, ms)` (a line
    for the status bar), `closed(engine)` (an old engine is done).

    `remote_spec(name)`: the (spec, key) of a saved remote lane, or why not;
    `apply_remotes(engine)`: give a new engine the saved remote lanes, returns
    the problems (both from app/connections, handed in by the window).
    `drafts`: the draft models chats pick for the engine in use."""

    loading = Signal(str)
    loaded = Signal(object)
    failed = Signal(str)
    notice = Signal(str, int)
    closed = Signal(object)

    def __init__(self, store, bridge, factory=None, fallback: str | None = None,
                 remote_spec: Callable | None = None,
                 apply_remotes: Callable | None = None, parent: QObject | None = None):
        super().__init__(parent)
        self.engine: EngineAPI | None = None
        self._store, self._bridge = store, bridge
        self._fallback = fallback
        self._requested: str | None = None
        self._remote_spec = remote_spec or (lambda name: f"No remote lane named {name!r}.")
        self._apply_remotes = apply_remotes or (lambda engine: [])
        self._closer = EngineCloser(self)
        self._closer.closed.connect(bridge.detach)
        self._closer.closed.connect(self.closed)
        self._factory = factory or load_engine
        self._remote_models: dict[str, tuple] = {}  # "remote:<name>" -> (spec, key)
        # Draft models a chat picks (draft_models.py): each engine's choices.
        self.drafts = DraftModels(parent)
        self.loaded.connect(self.drafts.show_for)
        self.download_job = None  # the last model download (app/models/download.py)
        self._kv = KVDisk()  # the saved-KV setting, read on the GUI thread at each load
        self._loader = EngineLoader(self._make, self)
        self._loader.loaded.connect(self._on_loaded)
        self._loader.failed.connect(self.fail)

    def load(self, source: str) -> None:
        """Load `source`: a model ('default', a file, a folder, a repo id) or
        "remote:<name>", a saved remote lane's model, run on its server."""
        self._requested = source
        if source.startswith("remote:"):
            found = self._remote_spec(source[len("remote:"):])
            if isinstance(found, str):
                self.fail(found)
                return
            self._remote_models[source] = found
        self._kv = kv_disk(self._store)
        self.loading.emit(f"Loading {source}…")
        self._loader.start(source)

    def forget_chat_kv(self, chat_id: int) -> None:
        """A deleted chat's KV on disk goes, unless another chat uses it."""
        forget_chat_kv(self.engine, chat_id)

    def _make(self, source: str):
        """On the loader thread: the engine for `source`; a base model (no
        chat template) is refused, before its weights load where its files
        tell (engine/models/tokenizer_only.py)."""
        if source in self._remote_models:
            from engine import RemoteModelEngine

            spec, key = self._remote_models[source]
            return RemoteModelEngine.load(spec, key)
        from engine.models.tokenizer_only import declares_chat_template

        if declares_chat_template(source) is False:
            raise EngineError(NO_CHAT.format(source=source), "no-chat-template")
        if self._factory is load_engine:  # the app's own: with the Settings' saved-KV choice
            engine = load_engine(source, self._kv)
        else:
            engine = self._factory(source)
        if not engine.capabilities.chat:  # what its files did not tell
            engine.close()
            raise EngineError(NO_CHAT.format(source=source), "no-chat-template")
        return engine

    def library(self, parent, **kwargs):
        """The model library (app/models/model_library.py): loading a model
        from it, or downloading one, goes through this session."""
        from app.models.model_library import library_for

        return library_for(parent, self._store, self, **kwargs)

    def download(self, repo_id: str, parent, **hub):
        """Download a Hub repo behind a progress dialog on `parent`, then load
        it (`download_job`: the running one)."""
        from app.models.download import start_download

        self.download_job = start_download(parent, repo_id, on_done=self.load,
                                           on_failed=self.fail, **hub)
        return self.download_job

    def set_mode(self, mode: str) -> str:
        """Switch the engine's mode and remember it; the mode it runs now
        (the old one, with the reason as a notice, when it cannot)."""
        try:
            self.engine.set_mode(mode)
            self._store.set_setting(MODE_KEY, mode)
        except EngineError as e:
            self.notice.emit(str(e), 10_000)
        return self.engine.mode

    def shut(self) -> None:
        """The window is closing: a model still loading is closed when it is
        loaded, and the current engine closes now (off the GUI thread)."""
        self._loader.closing = True
        if self.engine is not None:
            self._closer.close(self.engine)
            self.engine = None

    def wait(self, timeout: float = 30.0) -> None:
        """Wait for models still loading and engines being closed (at exit),
        so no MLX work is left when the process ends."""
        from PySide6.QtCore import QCoreApplication

        self._loader.wait(timeout)
        QCoreApplication.processEvents()  # a load that finished just before the close
        self._closer.wait(timeout)

    def _on_loaded(self, engine: EngineAPI) -> None:
        if self._loader.closing:  # loaded as the window closed: close it too
            self._closer.close(engine)
            return
        old, self.engine = self.engine, engine
        self._store.set_setting(LAST_MODEL_KEY, engine.model_info.source)  # for the next start
        problems = self._apply_remotes(engine)  # the saved remote lanes (Engine menu)
        if problems:
            self.notice.emit(" ".join(problems), 15_000)
        mode = self._store.setting(MODE_KEY)
        if mode and mode != engine.mode:
            try:
                engine.set_mode(mode)
            except EngineError:  # this model or machine cannot run it: keep the default
                pass
        if old is not None:
            # Closed off the GUI thread and still observed until it is done,
            # so answers it was streaming end as "stopped" in their tabs.
            self._closer.close(old)
        self._bridge.attach(engine)
        self.loaded.emit(engine)

    def fail(self, message: str) -> None:
        """A model could not be had (its load or download failed); the
        previous one (if any) stays loaded and usable."""
        fallback, self._fallback = self._fallback, None  # once
        if self.engine is None and fallback and self._requested != fallback:
            # The model remembered from last time is gone or broken: say so, and
            # start with the fallback (the bundled model) rather than with nothing.
            self.notice.emit(f"Could not load {self._requested}: {message}; "
                             f"loading {fallback} instead.", 30_000)
            self.failed.emit(message)
            self.load(fallback)
            return
        self.notice.emit(f"Could not load the model: {message}", 0)
        self.failed.emit(message)
