"""Draft models for chats (issue 32): which models in the library can draft
for the loaded one, and loading the one a chat picks, off the GUI thread.

A candidate is a model on disk of the loaded model's family with fewer
parameters (a smaller model of one family shares its tokenizer, as
SmolLM2-135M does SmolLM2-1.7B's). The engine checks the tokenizer when the
model loads; a mismatch, or any failure to load, is said in the chat's
footer and the chat keeps drafting by lookup. The engine holds one draft
model at a time: a chat that picks another replaces it for every chat that
drafts with a model (their answers are the same either way)."""

from __future__ import annotations

import threading
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from engine import EngineError


def _same(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except (OSError, ValueError):
        return False


def draft_candidates(entries: list, engine) -> list[tuple[str, str]]:
    """(source, name) of the library's models that can draft for `engine`'s
    model: its family, fewer parameters, not itself, describable."""
    if engine is None or not engine.capabilities.drafts:
        return []
    source = engine.model_info.source
    target = next((e for e in entries if _same(e.source, source)), None)
    family = target.family if target is not None else getattr(
        engine.model_info.model, "model_type", None)
    limit = target.parameters if target is not None and target.parameters else None
    return [(e.source, e.name) for e in entries
            if e.problem is None and e.family == family and not _same(e.source, source)
            and (limit is None or 0 < e.parameters < limit)]


def library_candidates(store, engine) -> list[tuple[str, str]]:
    """`draft_candidates` among the model library's models (model_library.py)."""
    from engine.models.loader import default_model_path

    from app.models.model_library import library_entries

    try:
        default = default_model_path()
    except EngineError:  # this copy has no bundled model
        default = None
    return draft_candidates(library_entries(store, default), engine)


class DraftModels(QObject):
    """A window's draft models: `choices` (the library's models that can
    draft for its engine's, refreshed by `show_for(engine)` in every chat's
    settings); `ensure(engine, source)` loads `source` on a worker thread and
    gives it to the engine; `loaded` or `failed(source, why)` says how it
    went (on the GUI thread: the dock's memory plan, the status bar)."""

    loaded = Signal(str)
    failed = Signal(str, str)

    def __init__(self, window=None):
        super().__init__(window)
        self.source: str | None = None  # loaded or loading
        self.choices: list[tuple[str, str]] = []
        self._threads: list[threading.Thread] = []
        self._window = window
        if hasattr(window, "statusBar"):
            self.failed.connect(lambda source, why: window.statusBar().showMessage(
                f"The draft model did not load (chats draft by lookup): {why}", 15_000))
            self.loaded.connect(self._show_plan)

    def _show_plan(self, _source: str) -> None:
        engine = self._window.engine
        if engine is not None:
            self._window.scheduler.show_memory_plan(engine.memory_plan)

    def show_for(self, engine) -> None:
        """A new engine: it has no draft model yet; its choices in every chat."""
        self.forget()
        window = self._window
        if window is None or not hasattr(window, "chat_tabs"):
            return
        try:
            self.choices = library_candidates(window.store, engine)
        except Exception as e:  # a library that cannot be read lists none: chats still draft
            self.choices = []
            window.statusBar().showMessage(f"Draft models not listed: {e}", 10_000)
        for tab in window.chat_tabs():
            tab.settings_row.set_draft_models(self.choices)

    def ensure(self, engine, source: str) -> None:
        if engine is None or (self.source is not None and _same(self.source, source)):
            return
        self.source = source

        def work():
            from engine.models.loader import load_model

            try:
                engine.set_draft_model(load_model(source))
            except EngineError as e:
                self._failed(source, str(e))
            except Exception as e:  # keep the app alive whatever a file holds
                self._failed(source, f"{type(e).__name__}: {e}")
            else:
                self._emit(self.loaded, source)

        thread = threading.Thread(target=work, name="draft-model-loader", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _failed(self, source: str, why: str) -> None:
        if self.source == source:
            self.source = None  # a later send tries again
        self._emit(self.failed, source, why)

    @staticmethod
    def _emit(signal, *args) -> None:
        try:
            signal.emit(*args)
        except RuntimeError:  # the window closed while the model loaded
            pass

    def forget(self) -> None:
        """A new engine: it has no draft model yet."""
        self.source = None

    def wait(self, timeout: float = 30.0) -> None:
        """For tests and for closing: the loads under way end."""
        for thread in self._threads:
            thread.join(timeout)
