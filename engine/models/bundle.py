"""Where a PyInstaller bundle keeps its data (packaging/tandem.spec). Light:
imports nothing heavy, so blas.py can use it before MLX loads."""

from __future__ import annotations

import sys
from pathlib import Path


def bundle_dir() -> Path | None:
    """The data folder of a PyInstaller bundle, or None when run from source."""
    meipass = getattr(sys, "_MEIPASS", None)
    return Path(meipass) if getattr(sys, "frozen", False) and meipass else None
