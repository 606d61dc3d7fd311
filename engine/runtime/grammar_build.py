"""Grammars built where they cannot hurt: bounded first, then compiled by
llguidance on a thread of their own, within a time limit, and cached.

Why a thread with a 64 MiB stack rather than a subprocess: a compiled
matcher is a native object that cannot cross a process boundary (a
subprocess would have to compile it again here, on an ordinary stack), and
llguidance's stack use is measured: ~8 KiB per level of schema nesting (a
`$ref` chain of 1,000 overflowed 8 MiB; 64 MiB built 5,000). The schema's
depth is bounded at 128 levels before llguidance sees it
(engine/core/schema_check.py), so the big stack is the second guard, not
the first.

Why off the lane threads and the caller's: a 243 KB `anyOf` schema takes
~0.5 s to build; on a lane thread that is a stalled step for every stream
in the batch. The builder runs one grammar at a time (memory stays that of
one build, however many arrive together; one thread holding the GIL for a
schema's checks, not one per caller), at a lower CPU priority than the
lanes on Linux (niceness 14 above theirs), and llguidance drops the GIL
while it builds. What a build still costs the streams on a machine whose
cores the lanes fill is measured in benchmarks/grammar_stall.py
(RESULTS.md): the lane no longer waits for it, but shares the machine. A caller waits at most `BUILD_TIMEOUT_S`; a build still running
then goes on and its result is cached, so the same schema sent again is
answered at once. (The limit counts from the start of a grammar's own
build, not from when it queued.)

Cached by the grammar's hash (kind and text): a hit costs a `deep_copy` of
the built matcher (~20 us) instead of a build, and a grammar found bad is
refused again without building.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from typing import Callable

from ..core import priority
from ..core.errors import EngineError

BUILD_TIMEOUT_S = 10.0
BUILD_STACK_BYTES = 64 << 20
MAX_QUEUED = 32  # grammars waiting to be built; more is a busy engine, not a bigger queue
QUEUE_WAIT_S = 120.0  # for the builds queued before one's own to end
CACHE_ENTRIES = 64
# A built matcher takes ~40x its grammar's text in memory (measured: 9.5 MB for
# a 240 KB `anyOf` schema on a 49k vocabulary), so the cache is bounded by the
# text it holds: 2 MiB of text, ~80 MB of matchers at most.
CACHE_TEXT_BYTES = 2 << 20
BUILDER_NICE = 14  # above the lanes' niceness (capped at 19): decoding first, builds in the gaps


def grammar_key(kind: str, text: str) -> str:
    return hashlib.sha256(f"{kind}\0{text}".encode("utf-8", "surrogatepass")).hexdigest()


class GrammarBuilder:
    """Builds with `build(kind, text)` (returns a template matcher or raises
    EngineError) on its own thread; `get` answers from the cache or waits."""

    def __init__(self, build: Callable[[str, str], object], nice: int = 0):
        self._build = build
        self._nice = nice + BUILDER_NICE
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, tuple[object, int]] = OrderedDict()  # key -> (result, bytes)
        self._cached_bytes = 0
        self._running: dict[str, Future] = {}  # key -> its build, queued or running
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._closed = False

    def get(self, kind: str, text: str, timeout_s: float | None = None):
        """The built template for (kind, text); EngineError if it is bad, too
        slow to build, or the builder is full."""
        key = grammar_key(kind, text)
        with self._lock:
            if self._closed:
                raise EngineError("The engine is closed.", "closed")
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return _unwrap(hit[0])
            future = self._running.get(key)
            if future is None:
                if len(self._running) >= MAX_QUEUED:
                    raise EngineError(f"{MAX_QUEUED} grammars are being built already; "
                                      "send this one again in a moment.", "busy")
                future = self._running[key] = _Build()
                self._queue.put((key, kind, text, future))
                self._start()
        # The limit is on its own build: the builds queued before it (at most
        # MAX_QUEUED, each within its limit or refused) are waited for apart.
        if not future.started.wait(QUEUE_WAIT_S):
            raise EngineError("The grammar builder is busy; send this again in a moment.",
                              "busy")
        timeout_s = BUILD_TIMEOUT_S if timeout_s is None else timeout_s
        left = timeout_s - (time.monotonic() - future.started_at)
        try:
            return _unwrap(future.result(max(left, 0.0)))
        except TimeoutError:
            raise EngineError(
                f"The {kind} grammar took more than {timeout_s:g} s to build; simplify it "
                "(fewer alternatives, shorter patterns).", "bad-argument") from None

    def run_first(self, work: Callable[[], object]) -> None:
        """Run `work` on the builder's thread before any build (its errors
        are the builds' to meet again)."""
        with self._lock:
            self._queue.put(work)
            self._start()

    def close(self, timeout: float = BUILD_TIMEOUT_S) -> bool:
        """Build nothing more (what is queued ends refused) and wait, within
        `timeout`, for the build under way (the tokenizer's, at load) to end
        and the thread with it: a thread still inside llguidance as the
        interpreter finalizes is ended there by pthread_exit, which its Rust
        frames do not survive (a segfault as the process exits). True if so."""
        with self._lock:
            self._closed = True
            self._cache.clear()
            thread = self._thread
        self._queue.put(None)
        if thread is not None:
            thread.join(timeout)
        return thread is None or not thread.is_alive()

    def _start(self) -> None:
        if self._thread is not None:
            return
        # stack_size applies to threads started after it: set, start, restore.
        # Nothing else in Tandem sets it, so the restore cannot undo another's.
        old = threading.stack_size(BUILD_STACK_BYTES)
        try:
            self._thread = threading.Thread(target=self._serve, name="grammar-builder",
                                            daemon=True)
            self._thread.start()
        finally:
            threading.stack_size(old)

    def _serve(self) -> None:
        priority.lower_thread(self._nice)
        while (job := self._queue.get()) is not None:
            if self._closed:  # queued before close: not built
                if not callable(job):
                    self._refuse(job)
                continue
            if callable(job):
                try:
                    job()
                except Exception:
                    pass  # said by the first build that needs it
                continue
            key, kind, text, future = job
            future.started_at = time.monotonic()
            future.started.set()
            try:
                result = self._build(kind, text)
            except EngineError as e:
                result = e
            except Exception as e:  # llguidance misused or broken: said, never raised here
                result = EngineError(f"The {kind} grammar could not be built: "
                                     f"{type(e).__name__}: {str(e)[:200]}", "bad-argument")
            with self._lock:
                self._running.pop(key, None)
                if not self._closed:
                    self._remember(key, result, len(text))
            future.set_result(result)

    def _refuse(self, job) -> None:
        key, _, _, future = job
        with self._lock:
            self._running.pop(key, None)
        future.started_at = time.monotonic()
        future.set_result(EngineError("The engine is closed.", "closed"))
        future.started.set()

    def _remember(self, key: str, result, size: int) -> None:
        self._cache[key] = (result, size)
        self._cached_bytes += size
        while len(self._cache) > CACHE_ENTRIES or (
                self._cached_bytes > CACHE_TEXT_BYTES and len(self._cache) > 1):
            _, (_, dropped) = self._cache.popitem(last=False)
            self._cached_bytes -= dropped


class _Build(Future):
    """A build's result, and when it started (the caller's limit counts from then)."""

    def __init__(self):
        super().__init__()
        self.started = threading.Event()
        self.started_at = 0.0


def _unwrap(result):
    if isinstance(result, EngineError):
        raise EngineError(str(result), result.kind)
    return result
