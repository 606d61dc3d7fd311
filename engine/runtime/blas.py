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
import warnings

from ..models.bundle import bundle_dir

_CANDIDATES = (
    "libopenblas.so.0",  # Debian/Ubuntu libopenblas0-pthread
    "libopenblasp.so.0",
    "libopenblas.so",
)

loaded_blas: str | None = None
blas_thread_ids: set[int] = set()  # worker threads OpenBLAS started when it loaded
_not_found = False  # every candidate was tried and none loaded
_warned_late = False

LATE_WARNING = ("mlx was imported before engine, so the system OpenBLAS was not loaded: "
                "import engine before mlx (engine loads the system OpenBLAS, which must "
                "come before MLX; without it matrix products are about 50x slower)")
ADVICE = ("The system OpenBLAS was not found, so matrix products use MLX's bundled "
          "reference BLAS and run about 50x slower. Install it for full speed "
          "(Debian/Ubuntu: sudo apt install libopenblas0-pthread).")


def _wanted() -> bool:
    return sys.platform.startswith("linux") and os.environ.get("TANDEM_NO_OPENBLAS") != "1"


def preload_openblas() -> str | None:
    """Load the system OpenBLAS globally; return its name, or None if absent.

    Does nothing off Linux or when TANDEM_NO_OPENBLAS=1 (used by the benchmark
    that measures it). When MLX is already imported it is too late to matter:
    warn once, since the only symptom would otherwise be a 50x slowdown.
    """
    global loaded_blas, _not_found, _warned_late
    if loaded_blas is not None or _not_found or not _wanted():
        return loaded_blas
    if "mlx.core" in sys.modules:
        if not _warned_late:
            _warned_late = True
            warnings.warn(LATE_WARNING, RuntimeWarning, stacklevel=2)
        return None
    names = list(_CANDIDATES)
    bundled = bundle_dir()
    if bundled is not None:
        # A bundle carries its own copy (packaging/tandem.spec): try it first.
        names = [str(bundled / name) for name in _CANDIDATES[:1]] + names
    found = ctypes.util.find_library("openblas")
    if found:
        names.append(found)
    from ..core.priority import thread_ids

    for name in names:
        before = thread_ids()
        try:
            ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        blas_thread_ids.update(thread_ids() - before)
        loaded_blas = name
        return name
    _not_found = True
    return None


def openblas_advice() -> str | None:
    """What to install when this Linux machine runs without OpenBLAS, else None.

    None too when preloading was skipped (off Linux, TANDEM_NO_OPENBLAS=1, or
    MLX imported first, which preload_openblas already warned about).
    """
    return ADVICE if _not_found else None
