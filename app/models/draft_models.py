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


class DraftModels(QObject):
    """The engine's draft model as chats ask for it: `ensure(engine, source)`
    loads `source` on a worker thread and gives it to the engine; `loaded`
    or `failed(source, why)` says how it went (on the GUI thread)."""

    loaded = Signal(str)
    failed = Signal(str, str)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.source: str | None = None  # loaded or loading
        self._threads: list[threading.Thread] = []

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
                self.loaded.emit(source)

        thread = threading.Thread(target=work, name="draft-model-loader", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _failed(self, source: str, why: str) -> None:
        if self.source == source:
            self.source = None  # a later send tries again
        self.failed.emit(source, why)

    def forget(self) -> None:
        """A new engine: it has no draft model yet."""
        self.source = None

    def wait(self, timeout: float = 30.0) -> None:
        """For tests and for closing: the loads under way end."""
        for thread in self._threads:
            thread.join(timeout)
