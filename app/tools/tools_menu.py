"""A chat's Tools button: the servers' tools, each on or off for this chat
(off by default: a tool offered costs prompt tokens and invites calls),
"call a tool first" (the first round must call one: a grammar forces it),
the tools this chat always allows, and Tools > MCP servers…. Disabled, with
the reason, when the loaded model cannot call tools. The chat's choices
are plain data (ChatTools) stored with the chat's settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from PySide6.QtCore import Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QToolButton

from app.ui.plain_text import tip
from app.ui.terminal import terminal_text


def key(server: str, tool: str) -> str:
    return f"{server}/{tool}"


@dataclass
class ChatTools:
    """One chat's tool choices (its params' "tools")."""

    on: set[str] = field(default_factory=set)  # server/tool offered to the model
    always: set[str] = field(default_factory=set)  # server/tool run without asking
    require: bool = False  # the first round must call a tool

    @classmethod
    def from_params(cls, raw) -> ChatTools:
        if not isinstance(raw, dict):
            return cls()
        names = lambda k: {x for x in raw.get(k, []) if isinstance(x, str)}  # noqa: E731
        return cls(names("on"), names("always"), raw.get("require") is True)

    def as_params(self) -> dict | None:
        if not (self.on or self.always or self.require):
            return None
        return {"on": sorted(self.on), "always": sorted(self.always), "require": self.require}


class ToolsButton(QToolButton):
    changed = Signal()  # the chat's choices changed: store them
    servers_requested = Signal()  # Tools > MCP servers…

    def __init__(self, service, choices: ChatTools | None = None, parent=None):
        super().__init__(parent)
        self.service, self.choices = service, choices or ChatTools()
        self.reason: str | None = "No model is loaded yet."
        self.left_out: list[str] = []  # why tools on were not offered at the last Send
        self.setPopupMode(QToolButton.InstantPopup)
        self.menu_ = QMenu(self)
        self.setMenu(self.menu_)
        self.menu_.aboutToShow.connect(self._opening)
        service.listed.connect(self._on_listed)
        self._update()

    # ---- what the chat asks ----------------------------------------------------------
    def offered(self) -> list:
        """The tools this chat offers the model now (none while unavailable)."""
        if self.reason:
            return []
        return [t for t in self.service.tools if key(t.server, t.name) in self.choices.on]

    def set_unavailable(self, reason: str | None) -> None:
        """Why the model cannot call tools (None: it can)."""
        self.reason = reason
        self._update()

    def set_choices(self, choices: ChatTools) -> None:
        self.choices = choices
        self._update()

    # ---- the menu --------------------------------------------------------------------
    def _update(self) -> None:
        on = len(self.offered()) if not self.reason else 0
        self.setText(f"Tools · {on} on" if on else "Tools")
        self.setEnabled(self.reason is None)
        self.setToolTip(tip(self.reason) if self.reason else
                        "The MCP servers' tools this chat offers the model; each call asks "
                        "you first")

    def _on_listed(self) -> None:
        self._update()
        if self.menu_.isVisible():
            self._build()

    def _opening(self) -> None:
        service = self.service
        if service.settings.servers and not service.tools and not service.listing:
            service.refresh()  # servers start on first use
        self._build()

    def _build(self) -> None:
        menu, service, choices = self.menu_, self.service, self.choices
        menu.clear()
        if not service.settings.servers:
            menu.addAction("No tool servers yet").setEnabled(False)
        elif service.listing:
            menu.addAction("Starting the tool servers…").setEnabled(False)
        for tool in service.tools:
            k = key(tool.server, tool.name)
            act = QAction(terminal_text(f"{tool.name}  ({tool.server})"), menu)
            act.setCheckable(True)
            act.setChecked(k in choices.on)
            act.setToolTip(tip(terminal_text(tool.description)))
            act.toggled.connect(lambda checked, k=k: self._toggle(k, checked))
            menu.addAction(act)
        menu.setToolTipsVisible(True)
        for server, note in service.notes.items():
            menu.addAction(terminal_text(f"⚠ {server}: {note}")[:200]).setEnabled(False)
        for note in self.left_out:  # (the model's template refused it, or no room)
            act = menu.addAction(terminal_text(f"⚠ {note}")[:200])
            act.setToolTip(tip(terminal_text(note)))
            act.setEnabled(False)
        if service.notes:
            menu.addAction("Start the servers again", lambda: service.refresh(retry=True))
        menu.addSeparator()
        require = menu.addAction("Call a tool first")
        require.setCheckable(True)
        require.setChecked(choices.require)
        require.setToolTip("The model's first answer must be a call of one of the tools "
                           "on (later rounds choose)")
        require.toggled.connect(self._require)
        if choices.always:
            forget = menu.addAction(terminal_text(
                f"Ask again before {', '.join(sorted(choices.always))}")[:200])
            forget.triggered.connect(self._forget_always)
        menu.addAction("MCP servers…", self.servers_requested.emit)

    def _toggle(self, k: str, on: bool) -> None:
        (self.choices.on.add if on else self.choices.on.discard)(k)
        self._update()
        self.changed.emit()

    def _require(self, on: bool) -> None:
        self.choices.require = on
        self.changed.emit()

    def _forget_always(self) -> None:
        self.choices.always.clear()
        self.changed.emit()
