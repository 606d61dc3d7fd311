"""macOS conventions (issue 34), tested offscreen with the platform faked:
About and Settings… carry the menu roles that move them into the
application menu; Cmd+M stays the system's Minimize (a Window menu) and the
local only / hybrid switch moves to Cmd+Shift+M; the About box shows
pyproject.toml's version; Settings… keeps the saved-KV choice, which the
next model load uses. Real windows on the tiny model."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from PySide6.QtGui import QAction, QKeySequence

from tests.windows import open_window


def _pyproject_version() -> str:
    with open(Path(__file__).resolve().parents[1] / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


def _titles(window) -> list[str]:
    return [a.text().replace("&", "") for a in window.menuBar().actions()]


def test_on_macos_about_settings_and_minimize_follow_the_system(qtbot, tiny_model_dir, db,
                                                               monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    window = open_window(qtbot, tiny_model_dir, db)
    menus = window.menus
    assert menus.about_action.menuRole() == QAction.AboutRole
    assert menus.settings_action.menuRole() == QAction.PreferencesRole
    assert menus.quit_action.menuRole() == QAction.QuitRole
    # Qt's Ctrl is Cmd on macOS: Cmd+M minimizes, the mode switch is Cmd+Shift+M.
    assert menus.minimize_action.shortcut() == QKeySequence("Ctrl+M")
    assert menus.toggle_mode_action.shortcut() == QKeySequence("Ctrl+Shift+M")
    assert "Window" in _titles(window)
    window.show()
    menus.minimize_action.trigger()
    qtbot.waitUntil(window.isMinimized, timeout=5000)
    window.close()


def test_elsewhere_ctrl_m_switches_the_mode_and_there_is_no_window_menu(qtbot, tiny_model_dir,
                                                                        db, monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    window = open_window(qtbot, tiny_model_dir, db)
    assert window.menus.toggle_mode_action.shortcut() == QKeySequence("Ctrl+M")
    assert not hasattr(window.menus, "minimize_action") and "Window" not in _titles(window)
    assert window.menus.about_action.menuRole() == QAction.AboutRole
    window.close()


def test_the_about_box_shows_pyprojects_version(qtbot, tiny_model_dir, db, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    from app.ui.version import version

    shown = []
    monkeypatch.setattr(QMessageBox, "about", lambda parent, title, text: shown.append(text))
    window = open_window(qtbot, tiny_model_dir, db)
    window.menus.about_action.trigger()
    assert version() == _pyproject_version()
    assert shown and f"Tandem {_pyproject_version()}" in shown[0]
    window.close()


def test_settings_keep_the_saved_kv_choice_for_the_next_load(qtbot, tiny_model_dir, db,
                                                             monkeypatch):
    import engine
    from app.models import engine_loader
    from app.window.settings_dialog import SettingsDialog

    window = open_window(qtbot, tiny_model_dir, db)
    assert engine_loader.kv_disk(window.store) == engine_loader.KVDisk(True, None)  # defaults
    dialog = SettingsDialog(window)
    qtbot.addWidget(dialog)
    dialog.kv_gib.setValue(2.5)
    dialog.accept()
    assert engine_loader.kv_disk(window.store) == engine_loader.KVDisk(True, int(2.5 * 2**30))
    dialog = SettingsDialog(window)  # opens on what was kept
    qtbot.addWidget(dialog)
    assert dialog.kv_gib.value() == 2.5 and dialog.kv_on.isChecked()
    dialog.kv_on.setChecked(False)
    assert not dialog.kv_gib.isEnabled()
    dialog.accept()
    off = engine_loader.kv_disk(window.store)
    assert off.on is False
    # The app's loader opens no disk tier when it is off, and the budget when on.
    seen = []
    monkeypatch.setattr(engine.Engine, "load", classmethod(
        lambda cls, source, **kw: seen.append(kw)))
    engine_loader.load_engine("default", off)
    engine_loader.load_engine("default", engine_loader.KVDisk(True, 123))
    assert seen[0]["kv_cache_dir"] is None
    assert seen[1]["kv_cache_bytes"] == 123 and seen[1]["kv_cache_dir"].endswith("kv")
    window.store.set_setting(engine_loader.KV_GIB, "not a number")  # damaged: the default
    assert engine_loader.kv_disk(window.store).budget_bytes is None
    window.close()
