"""Light and dark. The app follows the system's colour scheme (Qt's
QStyleHints, which tells it when the scheme changes) unless the user picks
one in View > Theme (kept in the settings). The palette is set whole, so
every widget, the transcript, the plots and the timeline (which draw in the
palette's colours) follow; code is highlighted with a dark set of colours
on a dark background."""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QAction, QActionGroup, QColor, QGuiApplication, QPalette

CHOICES = {"system": "Follow the system", "light": "Light", "dark": "Dark"}
SETTING = "theme"
_choice: dict[int, str] = {}  # app -> the user's choice; its scheme changes are followed


def dark_palette() -> QPalette:
    p = QPalette()
    colours = {
        QPalette.Window: "#202124", QPalette.WindowText: "#e8eaed",
        QPalette.Base: "#17181a", QPalette.AlternateBase: "#26282b",
        QPalette.ToolTipBase: "#2b2d30", QPalette.ToolTipText: "#e8eaed",
        QPalette.Text: "#e8eaed", QPalette.Button: "#2b2d30", QPalette.ButtonText: "#e8eaed",
        QPalette.BrightText: "#ff6b6b", QPalette.Link: "#8ab4f8",
        QPalette.LinkVisited: "#c58af9", QPalette.Highlight: "#3b6db3",
        QPalette.HighlightedText: "#ffffff", QPalette.PlaceholderText: "#9aa0a6",
        QPalette.Mid: "#3c4043", QPalette.Dark: "#111214", QPalette.Light: "#3c4043",
        QPalette.Midlight: "#303236", QPalette.Shadow: "#000000",
    }
    for role, colour in colours.items():
        p.setColor(role, QColor(colour))
    for role in (QPalette.Text, QPalette.ButtonText, QPalette.WindowText):
        p.setColor(QPalette.Disabled, role, QColor("#6f7378"))
    return p


def is_dark(palette: QPalette | None = None) -> bool:
    palette = palette or QGuiApplication.palette()
    return palette.color(QPalette.Base).lightness() < 128


def apply_theme(app, choice: str) -> None:
    """Use `choice` (system, light, dark) from now on. The request also goes
    to the platform (its own dialogs follow where it can); the palette is
    set here either way (some platforms, offscreen among them, take no
    requests and report no scheme)."""
    hints = app.styleHints()
    if id(app) not in _choice:  # the system's changes reach the palette (if following)
        hints.colorSchemeChanged.connect(lambda scheme: _system_changed(app, scheme))
    _choice[id(app)] = choice
    if choice in ("dark", "light"):
        scheme = Qt.ColorScheme.Dark if choice == "dark" else Qt.ColorScheme.Light
        hints.setColorScheme(scheme)
    else:
        hints.unsetColorScheme()
        scheme = hints.colorScheme()
    _set_palette(app, scheme)


def _system_changed(app, scheme) -> None:
    if _choice.get(id(app), "system") == "system":
        _set_palette(app, scheme)


def _set_palette(app, scheme) -> None:
    dark = scheme == Qt.ColorScheme.Dark
    app.setPalette(dark_palette() if dark else app.style().standardPalette())


class ThemeMenu(QObject):
    """View > Theme: follow the system, light or dark; the stored choice
    applies now. `actions`: the choice's key -> its checkable action."""

    def __init__(self, store, view_menu, parent: QObject):
        super().__init__(parent)
        self._store = store
        menu = view_menu.addMenu("Theme")
        group = QActionGroup(parent)
        chosen = store.setting(SETTING, "system")
        chosen = chosen if chosen in CHOICES else "system"
        self.actions: dict[str, QAction] = {}
        for key, label in CHOICES.items():
            act = QAction(label, parent, checkable=True)
            act.setChecked(key == chosen)
            act.triggered.connect(lambda _=False, k=key: self.choose(k))
            group.addAction(act)
            menu.addAction(act)
            self.actions[key] = act
        apply_theme(QGuiApplication.instance(), chosen)

    def choose(self, key: str) -> None:
        self._store.set_setting(SETTING, key)
        apply_theme(QGuiApplication.instance(), key)
