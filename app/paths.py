"""Where the app keeps its files."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QStandardPaths


def default_db_path() -> Path:
    override = os.environ.get("TANDEM_DB")
    if override:
        return Path(override)
    folder = QStandardPaths.writableLocation(QStandardPaths.AppDataLocation) or str(
        Path.home() / ".tandem")
    return Path(folder) / "tandem.db"
