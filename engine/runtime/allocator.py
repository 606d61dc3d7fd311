"""Giving memory back to the system once an engine is closed.

MLX frees a closed engine's weights and KV to its buffer cache, and
`mx.clear_cache()` frees those to the C allocator. On Linux, glibc's malloc
keeps much of that in its heaps (large blocks once freed raise its mmap
threshold, so the next ones come from the heap), and the process's resident
memory stays at its peak: the app held 1.43 GiB after one reload of the
default model where 0.79 GiB was live (benchmarks/reload_memory.py).
`malloc_trim(0)` returns free heap pages to the system. Elsewhere (macOS,
musl) there is nothing to do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_libc = None


def return_freed_memory() -> bool:
    """Return the C allocator's free memory to the system; False where that
    is not glibc (or TANDEM_NO_MALLOC_TRIM is set, for the benchmark)."""
    global _libc
    if not sys.platform.startswith("linux") or os.environ.get("TANDEM_NO_MALLOC_TRIM"):
        return False
    try:
        if _libc is None:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = _libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
    return True
