"""The Local server's embedding model (issue 35): a BERT-style model loaded
beside the chat model, so /v1/embeddings answers. Chosen in Engine > Local
server settings (a folder or a repo id, kept in the settings); loaded off
the GUI thread whenever a chat model is loaded and when the setting
changes; the status bar says what happened."""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, Signal


class EmbeddingModelLoader(QObject):
    """`load(engine, source)`: on a worker thread, then `done(message)` on
    the GUI thread (the model set on the engine, or why not)."""

    done = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.thread: threading.Thread | None = None

    def load(self, engine, source: str) -> None:
        if engine is None or not hasattr(engine, "set_embedding_model"):
            return
        if not source:
            if getattr(getattr(engine, "embedder", None), "model", None) is not None:
                engine.set_embedding_model(None)
            return
        self.thread = threading.Thread(target=self._load, args=(engine, source),
                                       name="embedding-loader", daemon=True)
        self.thread.start()

    def _load(self, engine, source: str) -> None:
        from engine import EngineError, load_embedding_model

        try:
            model = load_embedding_model(source)
            engine.set_embedding_model(model)
            self.done.emit(f"Embedding model {model.name} loaded: /v1/embeddings answers.")
        except EngineError as e:
            self.done.emit(f"Embedding model not loaded: {e}")
        except Exception as e:  # a bug or an odd file: said, never raised on a worker
            self.done.emit(f"Embedding model not loaded: {type(e).__name__}: {e}")
