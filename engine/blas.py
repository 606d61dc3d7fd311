"""Load the system OpenBLAS before MLX on Linux.

The `mlx[cpu]` wheel bundles a reference BLAS; MLX resolves its BLAS symbols at
load time, so a faster library loaded with RTLD_GLOBAL *before* the first
`import mlx` wins (1024x1024 f32 matmul: 0.39 s -> 0.007 s, see DESIGN.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

from .bundle import bundle_dir

_CANDIDATES = (
    "libopenblas.so.0",  # Debian/Ubuntu libopenblas0-pthread
    "libopenblasp.so.0",
    "libopenblas.so",
)

loaded_blas: str | None = None
blas_thread_ids: set[int] = set()  # worker threads OpenBLAS started when it loaded


def preload_openblas() -> str | None:
    """Load the system OpenBLAS globally; return its name, or None if absent.

    Does nothing off Linux, when MLX is already imported (too late to matter),
    or when TANDEM_NO_OPENBLAS=1 (used by the benchmark that measures it).
    """
    global loaded_blas
    if loaded_blas is not None:
        return loaded_blas
    if not sys.platform.startswith("linux") or os.environ.get("TANDEM_NO_OPENBLAS") == "1":
        return None
    if "mlx.core" in sys.modules:
        return None
    names = list(_CANDIDATES)
    bundled = bundle_dir()
    if bundled is not None:
        # A bundle carries its own copy (packaging/tandem.spec): try it first.
        names = [str(bundled / name) for name in _CANDIDATES[:1]] + names
    found = ctypes.util.find_library("openblas")
    if found:
        names.append(found)
    from .priority import thread_ids

    for name in names:
        before = thread_ids()
        try:
            ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        blas_thread_ids.update(thread_ids() - before)
        loaded_blas = name
        return name
    return None
