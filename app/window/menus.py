"""The window's menus and their shortcuts, in the platform's conventions."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence

from app.chat.chat_files import export_current, import_chosen
from app.connections.remote_lanes import open_remote_lanes
from app.connections.server_settings import open_server_settings
from app.ui.theme import build_theme_menu


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
    window.close_action = action(chat, "Close chat", QKeySequence.Close,
                                 lambda: close_current(window))
    window.export_action = action(chat, "Export as Markdown…", "Ctrl+Shift+E",
                                  lambda: export_current(window, "md"))
    window.export_json_action = action(chat, "Export as JSON…", "",
                                       lambda: export_current(window, "json"))
    window.import_action = action(chat, "Import chat…", "", lambda: import_chosen(window))
    window.search_action = action(chat, "Search chats", "Ctrl+K", lambda: search_chats(window))
    chat.addSeparator()
    window.stop_action = action(chat, "Stop (or cancel an edit)", "Esc",
                                lambda: stop_current(window))
    window.next_action = action(chat, "Next tab", QKeySequence.NextChild,
                                lambda: cycle_tab(window, 1))
    window.previous_action = action(chat, "Previous tab", QKeySequence.PreviousChild,
                                    lambda: cycle_tab(window, -1))
    chat.addSeparator()
    # Some platform themes (and offscreen) define no Quit key: Ctrl+Q then.
    quit_keys = QKeySequence(QKeySequence.Quit)
    window.quit_action = action(chat, "Quit", quit_keys if not quit_keys.isEmpty() else "Ctrl+Q",
                                window.request_quit)
    window.quit_action.setMenuRole(QAction.QuitRole)  # macOS: in the app menu, Cmd+Q
    engine_menu = window.menuBar().addMenu("&Engine")
    window.load_model_action = action(engine_menu, "Load model…", "Ctrl+Shift+O",
                                      window.pick_model)
    window.toggle_mode_action = action(engine_menu, "Toggle local only / Hybrid", "Ctrl+M",
                                       window.toggle_mode)
    engine_menu.addSeparator()
    window.server_action = action(engine_menu, "Local server (OpenAI API)", "",
                                  window.toggle_server)
    window.server_action.setCheckable(True)
    window.server_settings_action = action(engine_menu, "Local server settings…", "",
                                           lambda: open_server_settings(window))
    window.remote_lanes_action = action(engine_menu, "Remote lanes…", "",
                                        lambda: open_remote_lanes(window))
    view = window.menuBar().addMenu("&View")  # a closed dock comes back from here
    for dock in (window.chats_dock, window.scheduler_dock):
        view.addAction(dock.toggleViewAction())
    build_theme_menu(window, view)


# ---- what the Chat menu's actions do to the current tab ----------------------------------
def close_current(window) -> None:
    if window.current_tab() is not None:
        window.close_tab(window.current_tab())
    if not window.chat_tabs():
        window.new_chat()


def stop_current(window) -> None:
    """Esc: stop the answer being written; when none is, cancel an edit."""
    tab = window.current_tab()
    if tab is not None and (tab.is_streaming or not tab.cancel_edit()):
        window.stop(tab)


def cycle_tab(window, step: int) -> None:
    tabs = window.tabs
    if tabs.count():
        tabs.setCurrentIndex((tabs.currentIndex() + step) % tabs.count())


def search_chats(window) -> None:
    """Ctrl+K: the chat list's search field, shown and ready to type in."""
    window.chats_dock.show()
    window.chats_dock.raise_()
    window.sidebar.search.setFocus()
    window.sidebar.search.selectAll()
