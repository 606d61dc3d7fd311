"""Where the app keeps its files."""

from __future__ import annotations

import os
import re
from pathlib import Path

from PySide6.QtCore import QStandardPaths


def resource_path(name: str) -> Path:
    """A file of resources/: inside a PyInstaller bundle or in the checkout."""
    from engine.models.bundle import bundle_dir

    return (bundle_dir() or Path(__file__).resolve().parents[2]) / "resources" / name


def prepare_application(app) -> None:
    """Name and icon of the application, the same from source and bundle."""
    from PySide6.QtGui import QIcon

    app.setApplicationName("Tandem")
    app.setApplicationDisplayName("Tandem")
    app.setDesktopFileName("tandem")  # matches the Linux bundle's tandem.desktop
    icon = QIcon(str(resource_path("icon.svg")))
    if icon.isNull():  # no SVG icon engine: the rendered PNG (bundles have it)
        icon = QIcon(str(resource_path("tandem-256.png")))
    app.setWindowIcon(icon)


def file_name_for(title: str, limit: int = 60) -> str:
    """A chat title as a file name: letters, digits, '-', '_' and spaces kept."""
    return re.sub(r"[^\w\- ]+", "_", title).strip()[:limit].strip() or "chat"


def default_db_path() -> Path:
    override = os.environ.get("TANDEM_DB")
    if override:
        return Path(override)
    folder = QStandardPaths.writableLocation(QStandardPaths.AppDataLocation) or str(
        Path.home() / ".tandem")
    return Path(folder) / "tandem.db"


def instance_lock(db_path: Path):
    """Hold `<db>.lock` while this Tandem uses the database: the store allocates
    row ids in memory and assumes it is the only writer (app/store/chats.py).
    Returns (lock, held_by_other): a lock that cannot be taken because the
    folder is not writable is not a second Tandem; db_open reports the folder."""
    from PySide6.QtCore import QLockFile

    lock = QLockFile(f"{db_path}.lock")
    lock.setStaleLockTime(0)  # held as long as its process lives (Qt checks the PID)
    if lock.tryLock(0):
        return lock, False
    return lock, lock.error() == QLockFile.LockFailedError
