"""The window's menus and their shortcuts, in the platform's conventions."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence


def build_menus(window) -> None:
    """Menus with the platform's shortcuts (Qt maps Ctrl to Cmd on macOS)."""

    def action(menu, text, shortcut, slot):
        act = QAction(text, window)
        act.setShortcut(QKeySequence(shortcut))
        act.setShortcutContext(Qt.ApplicationShortcut)
        act.triggered.connect(slot)
        menu.addAction(act)
        return act

    chat = window.menuBar().addMenu("&Chat")
    window.new_action = action(chat, "New chat", QKeySequence.New, window.new_chat)
    window.close_action = action(chat, "Close chat", QKeySequence.Close, window._close_current)
    window.export_action = action(chat, "Export as Markdown…", "Ctrl+Shift+E",
                                  window._export_current)
    chat.addSeparator()
    window.stop_action = action(chat, "Stop", "Esc", window._stop_current)
    window.next_action = action(chat, "Next tab", QKeySequence.NextChild,
                                lambda: window._cycle_tab(1))
    window.previous_action = action(chat, "Previous tab", QKeySequence.PreviousChild,
                                    lambda: window._cycle_tab(-1))
    chat.addSeparator()
    # Some platform themes (and offscreen) define no Quit key: Ctrl+Q then.
    quit_keys = QKeySequence(QKeySequence.Quit)
    window.quit_action = action(chat, "Quit", quit_keys if not quit_keys.isEmpty() else "Ctrl+Q",
                                window.close)
    window.quit_action.setMenuRole(QAction.QuitRole)  # macOS: in the app menu, Cmd+Q
    engine_menu = window.menuBar().addMenu("&Engine")
    window.load_model_action = action(engine_menu, "Load model…", "Ctrl+Shift+O",
                                      window.pick_model)
    window.toggle_mode_action = action(engine_menu, "Toggle GPU-only / Hybrid", "Ctrl+M",
                                       window.toggle_mode)
    engine_menu.addSeparator()
    window.server_action = action(engine_menu, "Local server (OpenAI API)", "",
                                  window.toggle_server)
    window.server_action.setCheckable(True)
