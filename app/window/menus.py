"""The window's menus and their shortcuts, in the platform's conventions.

On macOS (issue 34) About, Settings… and Quit carry their menu roles, so Qt
moves them into the application menu (Cmd+, and Cmd+Q); Cmd+M is the
system's Minimize there (a Window menu), so switching local only / hybrid
takes Cmd+Shift+M (Ctrl+M elsewhere). The platform is read when the menus
are built, so tests fake it."""

from __future__ import annotations

import sys

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QAction, QKeySequence

from app.chat import draft_tint
from app.chat.chat_files import export_current, import_chosen
from app.chat.transcript import Transcript
from app.connections.server_settings import open_server_settings
from app.ui.theme import ThemeMenu


class Menus(QObject):
    """The window's menus, with the platform's shortcuts (Qt maps Ctrl to Cmd
    on macOS); each action is an attribute (`new_action`, `server_action`, ...),
    `theme` the View > Theme choices."""

    def __init__(self, window):
        super().__init__(window)
        self._window = window
        bar = window.menuBar()
        self._chat_menu(bar.addMenu("&Chat"))
        self._engine_menu(bar.addMenu("&Engine"))
        tools = bar.addMenu("&Tools")
        self.tool_servers_action = self._action(tools, "MCP servers…", "",
                                                window.requests.rounds.open_servers)
        self.tool_servers_action.setToolTip("Tool servers (MCP) whose tools chats can offer "
                                            "the model; each call asks you first")
        view = bar.addMenu("&View")  # a closed dock comes back from here
        for dock in (window.chats_dock, window.scheduler_dock):
            view.addAction(dock.toggleViewAction())
        self.theme = ThemeMenu(window.store, view, window)
        self.tint_drafts_action = self._action(view, "Tint accepted drafts", "",
                                               lambda on: tint_drafts(window, on))
        self.tint_drafts_action.setCheckable(True)
        self.tint_drafts_action.setToolTip(
            "Give the text of tokens that were proposed ahead and verified (drafts) a "
            "faint background")
        Transcript.tint_drafts = window.store.setting(draft_tint.SETTING, "off") == "on"
        self.tint_drafts_action.setChecked(Transcript.tint_drafts)
        if sys.platform == "darwin":  # the system's Window menu: Cmd+M minimizes
            window_menu = bar.addMenu("&Window")
            self.minimize_action = self._action(window_menu, "Minimize", "Ctrl+M",
                                                window.showMinimized)
        help_menu = bar.addMenu("&Help")
        self.about_action = self._action(help_menu, "About Tandem", "",
                                         lambda: show_about(window))
        self.about_action.setMenuRole(QAction.AboutRole)

    def _action(self, menu, text, shortcut, slot) -> QAction:
        act = QAction(text, self._window)
        act.setShortcut(QKeySequence(shortcut))
        act.setShortcutContext(Qt.ApplicationShortcut)
        act.triggered.connect(slot)
        menu.addAction(act)
        return act

    def _chat_menu(self, chat) -> None:
        window, action = self._window, self._action
        self.new_action = action(chat, "New chat", QKeySequence.New, window.new_chat)
        self.close_action = action(chat, "Close chat", QKeySequence.Close,
                                   lambda: close_current(window))
        self.export_action = action(chat, "Export as Markdown…", "Ctrl+Shift+E",
                                    lambda: export_current(window, "md"))
        self.export_json_action = action(chat, "Export as JSON…", "",
                                         lambda: export_current(window, "json"))
        self.import_action = action(chat, "Import chat…", "", lambda: import_chosen(window))
        self.search_action = action(chat, "Search chats", "Ctrl+K",
                                    lambda: search_chats(window))
        self.clear_kv_action = action(chat, "Clear saved KV", "", lambda: clear_saved_kv(window))
        self.clear_kv_action.setToolTip("Remove the KV kept on disk so chats resume warm "
                                        "after a restart (it is rebuilt as you chat)")
        chat.addSeparator()
        self.stop_action = action(chat, "Stop (or cancel an edit)", "Esc",
                                  lambda: stop_current(window))
        self.next_action = action(chat, "Next tab", QKeySequence.NextChild,
                                  lambda: cycle_tab(window, 1))
        self.previous_action = action(chat, "Previous tab", QKeySequence.PreviousChild,
                                      lambda: cycle_tab(window, -1))
        chat.addSeparator()
        self.settings_action = action(chat, "Settings…", QKeySequence.Preferences,
                                      lambda: open_settings(window))
        self.settings_action.setMenuRole(QAction.PreferencesRole)  # macOS: the app menu, Cmd+,
        # Some platform themes (and offscreen) define no Quit key: Ctrl+Q then.
        quit_keys = QKeySequence(QKeySequence.Quit)
        self.quit_action = action(chat, "Quit",
                                  quit_keys if not quit_keys.isEmpty() else "Ctrl+Q",
                                  window.request_quit)
        self.quit_action.setMenuRole(QAction.QuitRole)  # macOS: in the app menu, Cmd+Q

    def _engine_menu(self, engine_menu) -> None:
        window, action = self._window, self._action
        self.load_model_action = action(engine_menu, "Load model…", "Ctrl+Shift+O",
                                        lambda: window.model_library().exec())
        self.toggle_mode_action = action(engine_menu, "Toggle local only / Hybrid",
                                         MODE_KEYS_MAC if sys.platform == "darwin" else "Ctrl+M",
                                         window.toggle_mode)
        engine_menu.addSeparator()
        self.server_action = action(engine_menu, "Local server (OpenAI API)", "",
                                    window.toggle_server)
        self.server_action.setCheckable(True)
        self.server_settings_action = action(engine_menu, "Local server settings…", "",
                                             lambda: open_server_settings(window))
        self.remote_lanes_action = action(engine_menu, "Remote lanes…", "",
                                          window.open_remote_lanes)

    def allow_mode_toggle(self, toggles: bool) -> None:
        """Ctrl+M: nothing to toggle without a GPU lane or a remote lane."""
        self.toggle_mode_action.setEnabled(toggles)
        self.toggle_mode_action.setStatusTip(
            "" if toggles else "This engine runs CPU-only: no GPU lane or remote lane to "
                               "switch to.")


MODE_KEYS_MAC = "Ctrl+Shift+M"  # Qt's Ctrl is Cmd on macOS, where Cmd+M minimizes


def show_about(window) -> None:
    from PySide6.QtWidgets import QMessageBox

    from app.ui.version import version

    QMessageBox.about(window, "About Tandem",
                      f"<b>Tandem {version()}</b><p>Chat with local language models; its "
                      "engine schedules each request across the CPU and the GPU.</p>"
                      "<p>Apache License 2.0.</p>")


def open_settings(window) -> None:
    from app.window.settings_dialog import SettingsDialog

    SettingsDialog(window).exec()


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


def tint_drafts(window, on: bool) -> None:
    """View > Tint accepted drafts: every chat's view, now and after a restart."""
    Transcript.tint_drafts = bool(on)
    window.store.set_setting(draft_tint.SETTING, "on" if on else "off")
    for tab in window.chat_tabs():
        tab.render()


def clear_saved_kv(window) -> None:
    """Chat > Clear saved KV: the loaded model's KV kept on disk goes."""
    from engine import format_bytes

    clear = getattr(window.engine, "clear_saved_kv", None)
    freed = clear() if clear is not None else 0
    window.statusBar().showMessage(f"Cleared {format_bytes(freed)} of saved KV." if freed
                                   else "No saved KV to clear.", 10_000)
