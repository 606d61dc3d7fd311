"""Starting the desktop app: the database first (a problem with it gets a
dialog before any window), then the main window, and an orderly exit."""

from __future__ import annotations

import sys

from PySide6.QtWidgets import QApplication

from app.models.engine_session import LAST_MODEL_KEY
from app.window.main_window import MainWindow
from app.ui.paths import default_db_path, prepare_application


def startup_model(store, requested: str) -> str:
    """The model to start with: the one asked for, else the last session's."""
    if requested != "default":
        return requested
    return store.setting(LAST_MODEL_KEY, "default") or "default"


def run_gui(model: str = "default") -> int:
    from app.store import db_dialog

    app = QApplication.instance() or QApplication(sys.argv)
    prepare_application(app)
    # Before any window: a database that cannot be used is explained, with ways on.
    opened = db_dialog.open_database(default_db_path())
    if opened is None:
        return 1
    store, lock = opened
    start = startup_model(store, model)
    # Only a remembered model falls back to the bundled one: a model asked for
    # on the command line that cannot load is reported, not replaced.
    window = MainWindow(start, store=store,
                        fallback_model="default" if start != model else None)
    window.show()
    status = app.exec()
    window.wait_for_engines()
    left = store.close(timeout=3.0)
    if left:
        where = " and ".join(str(p) for p in store.journal_files) or "no journal (lost)"
        print(f"tandem: {left} changes could not be saved yet; they are kept in {where} and "
              f"saved at the next start", file=sys.stderr)
    if lock is not None:
        lock.unlock()
    return status
