"""Where the app keeps its files."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QStandardPaths


def resource_path(name: str) -> Path:
    """A file of resources/: inside a PyInstaller bundle or in the checkout."""
    from engine.bundle import bundle_dir

    return (bundle_dir() or Path(__file__).resolve().parents[1]) / "resources" / name


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


def default_db_path() -> Path:
    override = os.environ.get("TANDEM_DB")
    if override:
        return Path(override)
    folder = QStandardPaths.writableLocation(QStandardPaths.AppDataLocation) or str(
        Path.home() / ".tandem")
    return Path(folder) / "tandem.db"
