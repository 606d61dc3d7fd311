"""The restore phase (issue 33): a request whose prompt starts with KV the
disk tier holds beyond the RAM prefix cache has it read back into the RAM
cache on this thread (checked files, off the lanes and off the caller's
thread), then is routed as any request: warm, so the router sees its
cached tokens. `Request.restored_tokens` / `restore_s` say what it read."""

from __future__ import annotations

import queue
import sys
import threading
import time
import traceback
from typing import Callable

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from .core.request import Request
from .core.restore_cost import DiskSpeed, restore_pays
from .runtime import lanethreads, pauses
from .runtime.lanethreads import Started

CLOSE_S = 5.0  # how long close() waits for a restore under way


class Restorer:
    """`wants(request)` (plain Python: the disk tier's in-memory index and
    core/restore_cost.py: reading beats prefilling on the fastest lane);
    `submit(request)` queues it; `place(request)` routes it once read (or
    at once when nothing could be read); `cancelled(request)` ends one
    cancelled meanwhile. `prefill_rates()`: each lane's prefill tokens/s."""

    def __init__(self, prefix_cache, place: Callable[[Request], None],
                 cancelled: Callable[[Request], None],
                 prefill_rates: Callable[[], list] = list):
        self.prefix_cache, self.disk = prefix_cache, prefix_cache.disk
        self._place, self._cancelled = place, cancelled
        self.prefill_rates = prefill_rates
        self.speed = DiskSpeed()
        self._queue: queue.Queue = queue.Queue()
        self._thread: Started | None = None
        self._started = threading.Lock()

    def wants(self, request: Request) -> bool:
        limit = request.num_prompt - 1
        self.disk.refresh()  # another process may have saved it (one stat otherwise)
        match = self.disk.match(request.prompt_ids, limit)
        ram = self.prefix_cache.cached_length(request.prompt_ids, limit)
        if match.num_tokens <= ram:
            return False
        pays, request.restore_note = restore_pays(
            match.num_tokens - ram, _bytes(match), self.speed, self.prefill_rates())
        return pays

    def submit(self, request: Request) -> None:
        with self._started:  # submit is called from any thread
            if self._thread is None:  # a parked CPU thread: it never ends (lanethreads.py)
                self._thread = lanethreads.start(self._loop, "cpu", 0, "kv-restorer")
        self._queue.put(request)

    def _loop(self, stream: mx.Stream) -> None:
        while True:
            request = self._queue.get()
            if request is None:
                return
            if request.cancel_event.is_set():
                self._cancelled(request)
                continue
            try:
                # A CPU stream, never the GPU's from this thread (engine/README.md,
                # "Threads"): reading, checking and the RAM insert are memory work.
                with mx.stream(stream):
                    self._restore(request)
            except Exception:  # restoring is an optimisation: the request goes on cold
                traceback.print_exc()
            self._place(request)

    def _restore(self, request: Request) -> None:
        pauses.at("restoring")
        started = time.perf_counter()
        ids = request.prompt_ids
        match = self.disk.match(ids, request.num_prompt - 1)
        read, layers = self.disk.read(match)
        if not read:
            return
        self.speed.observe(_bytes(match), time.perf_counter() - started)
        caches = []
        for keys, values in layers:
            cache = KVCache()
            cache.keys, cache.values, cache.offset = keys, values, read
            caches.append(cache)
        self.prefix_cache.insert(ids[:read], caches)
        request.restored_tokens = read
        request.restore_s = time.perf_counter() - started

    def close(self) -> None:
        """What is queued is restored and placed, then its thread parks."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.wait_parked(CLOSE_S)


def _bytes(match) -> int:
    """The bytes a match reads: each file's share for the positions used."""
    return int(sum(ref.nbytes * (until - ref.start) / max(ref.end - ref.start, 1)
                   for ref, until in match.segments))


DEFAULT_BUDGET = 10 << 30  # at most 10 GiB, and at most a tenth of the disk's free space


def open_disk_tier(prefix_cache, loaded, folder: str, budget_bytes: int | None = None):
    """The disk tier for `loaded` under `folder` (its own subfolder per model
    identity), below `prefix_cache`; None, with nothing created, when the
    model's prefix cache is off (its caches cannot be cut into blocks)."""
    import shutil
    from pathlib import Path

    from .models.identity import model_identity
    from .runtime.disk_tier import DiskTier
    from .runtime.kv_file import layout_of

    if prefix_cache.off_reason is not None:
        return None
    try:
        Path(folder).mkdir(parents=True, exist_ok=True, mode=0o700)
        if budget_bytes is None:
            budget_bytes = min(DEFAULT_BUDGET, shutil.disk_usage(folder).free // 10)
        prefix_cache.disk = DiskTier(folder, model_identity(loaded), prefix_cache.block_size,
                                     budget_bytes, layout=layout_of(loaded.model))
    except OSError as e:  # an unusable folder costs the warm restarts, not the model
        print(f"tandem: KV is not kept on disk ({folder}: {e.strerror or e}).",
              file=sys.stderr)
        return None
    return prefix_cache.disk
