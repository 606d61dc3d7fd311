"""Loading an engine off the GUI thread, so the window appears at once."""

from __future__ import annotations

import gc
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from PySide6.QtCore import QObject, Signal

from engine import EngineError

if TYPE_CHECKING:
    from engine import Engine

# The engine's threads run this much nicer than the GUI thread (Linux), so the
# window stays smooth while lanes keep every core busy (benchmarks/RESULTS.md,
# "event-loop latency").
ENGINE_NICE = 10


KV_ON = "kv_disk"  # setting: "on" / "off" (Settings…, app/window/settings_dialog.py)
KV_GIB = "kv_disk_gib"  # setting: a number; absent or 0: the engine's default (engine/restore.py)


@dataclass(frozen=True, slots=True)
class KVDisk:
    """KV kept on disk so chats resume warm, as the engine loader takes it."""

    on: bool = True
    budget_bytes: int | None = None  # None: the smaller of 10 GiB and a tenth of the free space


def kv_disk(store) -> KVDisk:
    """The saved-KV setting (GUI thread: the store is read there)."""
    try:
        gib = float(store.setting(KV_GIB, "") or 0)
    except (TypeError, ValueError):  # a damaged value: the default
        gib = 0.0
    return KVDisk(store.setting(KV_ON, "on") != "off",
                  int(gib * (1 << 30)) if gib > 0 else None)


def load_engine(source: str, kv: KVDisk = KVDisk()) -> "Engine":
    """The app's engine for `source`. Runs on the loader thread: the first use
    of `engine.Engine` imports MLX, mlx-lm and transformers there, after the
    window is already on screen."""
    from engine import Engine, default_lanes

    from app.store.journal import cache_dir

    # What the lanes learn of each other (contention) is kept for the next
    # start. Lookup drafts on every lane (a chat's settings can turn them
    # off): the lanes verify them only where that pays, and the text is the
    # same either way. Finished answers' KV is kept on disk, so a chat
    # resumes warm after a restart (engine/restore.py).
    return Engine.load(source, lanes=default_lanes("lookup"), worker_nice=ENGINE_NICE,
                       cost_store=str(cache_dir() / "lane-costs.json"),
                       kv_cache_dir=str(kv_dir()) if kv.on else None,
                       kv_cache_bytes=kv.budget_bytes)


def kv_dir():
    """Where the app keeps models' KV on disk (the platform's cache folder)."""
    from app.store.journal import cache_dir

    return cache_dir() / "kv"


def forget_chat_kv(engine, chat_id: int) -> None:
    """A deleted chat's saved KV that no other chat uses goes: through the
    engine's disk tier (after its queued saves), or straight from the
    folder when no model with one is loaded."""
    from engine import release_saved_kv

    disk = getattr(getattr(engine, "prefix_cache", None), "disk", None)
    if disk is not None:
        engine.forget_saved_kv(str(chat_id))
    else:
        release_saved_kv(kv_dir(), str(chat_id))


class EngineLoader(QObject):
    """Runs `factory(source)` on a worker thread; the result arrives on the
    GUI thread as `loaded(engine)` or `failed(message)`."""

    loaded = Signal(object)
    failed = Signal(str)

    def __init__(self, factory: Callable[[str], "Engine"] = load_engine,
                 parent: QObject | None = None):
        super().__init__(parent)
        self.factory = factory
        self.closing = False  # the window is gone: a model that loads now is closed
        self._threads: list[threading.Thread] = []

    def start(self, source: str) -> None:
        def work():
            try:
                engine = self.factory(source)
            except EngineError as e:
                self.failed.emit(str(e))
            except Exception as e:  # keep the window alive whatever happens
                self.failed.emit(f"{type(e).__name__}: {e}")
            else:
                if self.closing:  # quit while it loaded: nobody will use it
                    engine.close()
                else:
                    self.loaded.emit(engine)

        # Loading allocates heavily, so Python's garbage collector will run on
        # the loader thread; collect first, here on the GUI thread, so that no
        # dead Qt object (a closed dialog in a reference cycle) is destroyed
        # there (a Qt destructor off the GUI thread can deadlock with it).
        gc.collect()
        thread = threading.Thread(target=work, name="model-loader", daemon=True)
        self._threads.append(thread)
        thread.start()

    def wait(self, timeout: float = 60.0) -> None:
        """Join loads still running (at exit: MLX must not be mid-load then)."""
        for thread in self._threads:
            thread.join(timeout)
        self._threads = [t for t in self._threads if t.is_alive()]


class EngineCloser(QObject):
    """Closes engines on worker threads: closing waits for the lanes to end
    their current steps and frees the model, which must not freeze the window.
    `closed(engine)` arrives on the GUI thread when one is done."""

    closed = Signal(object)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._threads: list[threading.Thread] = []

    def close(self, engine: "Engine") -> None:
        def work():
            try:
                engine.close()
            finally:
                try:
                    self.closed.emit(engine)
                except RuntimeError:  # the window went first: nobody is listening
                    pass

        thread = threading.Thread(target=work, name="engine-closer", daemon=True)
        self._threads.append(thread)
        thread.start()

    def wait(self, timeout: float = 30.0) -> None:
        """Join the closing threads (at exit, after the window is gone)."""
        for thread in self._threads:
            thread.join(timeout)
        self._threads = [t for t in self._threads if t.is_alive()]
