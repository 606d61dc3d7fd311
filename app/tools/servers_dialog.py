"""Tools > MCP servers…: the tool servers the app runs, added by hand (a
stdio command, or a Streamable HTTP URL: https unless on this machine) or
imported from the `mcpServers` JSON of LM Studio, Cursor or Claude Desktop;
each with "ask before each call", its status and its log; and the tool
loop's limits. Environment values and headers go to the system keyring,
never to Tandem's files: a stored one shows as <kept> (keep it as it is)."""

from __future__ import annotations

import shlex
from pathlib import Path

from PySide6.QtCore import QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (QCheckBox, QDialog, QDialogButtonBox, QDoubleSpinBox,
                               QFileDialog, QFormLayout, QHBoxLayout, QInputDialog, QLabel,
                               QLineEdit, QListWidget, QListWidgetItem, QMessageBox,
                               QPlainTextEdit, QPushButton, QSpinBox, QVBoxLayout, QWidget)

from toolhost.config import ConfigError

from app.connections import keys
from app.tools import servers as config
from app.ui.plain_text import plain
from app.ui.terminal import terminal_text


def _pairs(text: str, sep: str) -> dict[str, str]:
    """NAME=value (or Name: value) lines as a dict; blank lines skipped."""
    out = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, found, value = line.partition(sep)
        if not found or not name.strip():
            raise ConfigError(f"Line {number} is not name{sep}value.")
        out[name.strip()] = value.strip() if sep == ":" else value
    return out


class ServersDialog(QDialog):
    saved = Signal(object)  # the ToolSettings stored

    def __init__(self, service, parent=None):
        super().__init__(parent)
        self.setWindowTitle("MCP servers")
        self.setMinimumSize(720, 480)
        self.service = service
        settings = service.settings
        self._entries = list(settings.servers)
        self._secrets: dict[tuple[str, str, str], str] = {}
        self._stored_as: dict[str, str] = {}  # a renamed server -> its name in the keyring
        self.list = QListWidget()
        self.list.currentRowChanged.connect(self._show)
        add = QPushButton("Add")
        add.clicked.connect(self._add)
        self.remove_button = QPushButton("Remove")
        self.remove_button.clicked.connect(self._remove)
        imported = QPushButton("Import mcpServers JSON…")
        imported.setToolTip("LM Studio's mcp.json, Cursor's or Claude Desktop's configuration")
        imported.clicked.connect(self._import)
        left = QVBoxLayout()
        left.addWidget(self.list, 1)
        row = QHBoxLayout()
        row.addWidget(add)
        row.addWidget(self.remove_button)
        left.addLayout(row)
        left.addWidget(imported)
        left_box = QWidget()
        left_box.setLayout(left)
        self.form = self._build_form()
        top = QHBoxLayout()
        top.addWidget(left_box, 2)
        top.addWidget(self.form, 3)
        self.rounds = QSpinBox()
        self.rounds.setRange(1, 64)
        self.rounds.setValue(settings.rounds)
        self.call_s = QDoubleSpinBox()
        self.call_s.setRange(1, 3600)
        self.call_s.setDecimals(0)
        self.call_s.setSuffix(" s")
        self.call_s.setValue(settings.call_s)
        limits = QFormLayout()
        limits.addRow("Rounds of tool calls per answer", self.rounds)
        limits.addRow("A call's time limit", self.call_s)
        self.message = plain(QLabel(""))
        self.message.setWordWrap(True)
        where = QLabel(keys.where("after a restart, enter the environment values and headers "
                                  "again.") + " Commands, arguments and URLs are kept in "
                       "Tandem's settings: put keys and tokens in Environment or Headers.")
        where.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.Save | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self._save)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(top, 1)
        layout.addLayout(limits)
        layout.addWidget(where)
        layout.addWidget(self.message)
        layout.addWidget(buttons)
        self._fill()
        service.listed.connect(self._fill_status)

    def _build_form(self) -> QWidget:
        self.name = QLineEdit()
        self.command = QLineEdit()
        self.command.setPlaceholderText("a program, e.g. npx or uvx (stdio)")
        self.args = QLineEdit()
        self.args.setPlaceholderText("its arguments, as in a shell")
        self.env = QPlainTextEdit()
        self.env.setPlaceholderText("NAME=value, one a line (kept in the keyring)")
        self.env.setMaximumHeight(70)
        self.url = QLineEdit()
        self.url.setPlaceholderText("or a Streamable HTTP URL, https://…/mcp")
        self.headers = QPlainTextEdit()
        self.headers.setPlaceholderText("Name: value, one a line (kept in the keyring)")
        self.headers.setMaximumHeight(70)
        self.ask = QCheckBox("Ask before each call of its tools")
        self.ask.setChecked(True)
        self.status = plain(QLabel(""))
        self.status.setWordWrap(True)
        self.log_button = QPushButton("Open log")
        self.log_button.clicked.connect(self._open_log)
        for field in (self.name, self.command, self.args, self.url):
            field.editingFinished.connect(self._apply)
        self.env.textChanged.connect(self._apply)
        self.headers.textChanged.connect(self._apply)
        self.ask.toggled.connect(self._apply)
        form = QFormLayout()
        form.addRow("Name", self.name)
        form.addRow("Command", self.command)
        form.addRow("Arguments", self.args)
        form.addRow("Environment", self.env)
        form.addRow("URL", self.url)
        form.addRow("Headers", self.headers)
        form.addRow("", self.ask)
        form.addRow("Status", self.status)
        form.addRow("", self.log_button)
        box = QWidget()
        box.setLayout(form)
        return box

    # ---- the list ----------------------------------------------------------------------
    def _fill(self, select: int = 0) -> None:
        self.list.blockSignals(True)
        self.list.clear()
        for entry in self._entries:
            self.list.addItem(QListWidgetItem(entry.name))
        self.list.blockSignals(False)
        self.form.setEnabled(bool(self._entries))
        self.remove_button.setEnabled(bool(self._entries))
        if self._entries:
            self.list.setCurrentRow(min(select, len(self._entries) - 1))
            self._show(self.list.currentRow())
        self._fill_status()

    def _fill_status(self) -> None:
        service = self.service
        for row, entry in enumerate(self._entries):
            tools = [t for t in service.tools if t.server == entry.name]
            note = service.notes.get(entry.name)
            state = (f"⚠ {note}" if note else f"{len(tools)} tools" if tools else
                     "starting…" if service.listing else "not started yet")
            self.list.item(row).setText(terminal_text(f"{entry.name} — {state}")[:120])
            if row == self.list.currentRow():
                self.status.setText(terminal_text(state))

    def _show(self, row: int) -> None:
        if not 0 <= row < len(self._entries):
            return
        entry = self._entries[row]
        self._showing = True
        self.name.setText(entry.name)
        self.command.setText(entry.command)
        self.args.setText(shlex.join(entry.args))
        self.url.setText(entry.url)
        self.env.setPlainText("\n".join(
            f"{n}={self._secrets.get((entry.name, 'env', n), config.KEPT)}"
            for n in entry.env_names))
        self.headers.setPlainText("\n".join(
            f"{n}: {self._secrets.get((entry.name, 'header', n), config.KEPT)}"
            for n in entry.header_names))
        self.ask.setChecked(entry.ask)
        self.log_button.setEnabled(entry.kind == "stdio")
        self._showing = False
        self._fill_status()

    def _apply(self, strict: bool = False) -> None:
        """The form's fields into the entry shown (checked on Save: `strict`
        raises ConfigError where the fields cannot be read)."""
        row = self.list.currentRow()
        if getattr(self, "_showing", False) or not 0 <= row < len(self._entries):
            return
        old = self._entries[row]
        try:
            args = tuple(shlex.split(self.args.text()))
            env = _pairs(self.env.toPlainText(), "=")
            headers = _pairs(self.headers.toPlainText(), ":")
        except (ValueError, ConfigError) as e:
            self.message.setText(f"⚠ {old.name}: {e}")
            if strict:
                raise ConfigError(f"{old.name}: {e}") from None
            return
        name = self.name.text().strip()
        if name != old.name:  # renamed: its kept secrets are read from the old name on Save
            self._stored_as[name] = self._stored_as.pop(old.name, old.name)
        entry = config.ServerEntry(name, self.command.text().strip(), args,
                                   self.url.text().strip(), tuple(env), tuple(headers),
                                   self.ask.isChecked())
        self._secrets = {k: v for k, v in self._secrets.items() if k[0] != old.name}
        self._secrets.update({(name, "env", k): v for k, v in env.items()})
        self._secrets.update({(name, "header", k): v for k, v in headers.items()})
        self._entries[row] = entry
        self.list.item(row).setText(name)
        self.message.setText("")

    def _add(self) -> None:
        taken = {e.name for e in self._entries}
        name = next(f"server-{i}" for i in range(1, 1000) if f"server-{i}" not in taken)
        self._entries.append(config.ServerEntry(name, command="npx"))
        self._fill(len(self._entries) - 1)
        self.name.setFocus()

    def _remove(self) -> None:
        row = self.list.currentRow()
        if 0 <= row < len(self._entries):
            gone = self._entries.pop(row)
            self._secrets = {k: v for k, v in self._secrets.items() if k[0] != gone.name}
            self._fill(row)

    def _import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import MCP servers", str(Path.home()),
                                              "JSON (*.json);;All files (*)")
        if path:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                self.message.setText(f"⚠ {path} could not be read: {e}")
                return
        else:
            text, ok = QInputDialog.getMultiLineText(
                self, "Import MCP servers", 'Paste an mcpServers JSON ({"mcpServers": {…}}):')
            if not ok or not text.strip():
                return
        self.import_text(text)

    def import_text(self, text: str) -> None:
        """Add (or replace, by name) the servers of an mcpServers JSON."""
        try:
            entries, secrets = config.from_json(text)
        except ConfigError as e:
            self.message.setText(f"⚠ Not imported: {e}")
            return
        names = {e.name for e in entries}
        self._entries = [e for e in self._entries if e.name not in names] + entries
        self._secrets = {k: v for k, v in self._secrets.items() if k[0] not in names}
        self._secrets.update(secrets)
        self._fill(len(self._entries) - 1)
        self.message.setText(f"Imported {len(entries)} servers: Save to use them "
                             "(their tools ask before each call).")

    def _open_log(self) -> None:
        row = self.list.currentRow()
        if 0 <= row < len(self._entries):
            path = self.service.log_path(self._entries[row].name)
            if path.exists():
                QDesktopServices.openUrl(QUrl.fromLocalFile(str(path)))
            else:
                self.message.setText("No log yet: the server has not run.")

    # ---- saving ------------------------------------------------------------------------
    def settings(self) -> config.ToolSettings:
        """What Save would store; ConfigError says what is wrong first."""
        self._apply(strict=True)
        names = [e.name for e in self._entries]
        if len(set(names)) != len(names):
            raise ConfigError("Two servers have the same name.")
        for entry in self._entries:
            config.check(entry)
        return config.ToolSettings(tuple(self._entries), self.rounds.value(),
                                   float(self.call_s.value()))

    def _save(self) -> None:
        try:
            settings = self.settings()
        except ConfigError as e:
            self.message.setText(f"⚠ {e}")
            return
        secrets = {k: v for k, v in self._secrets.items()
                   if (e := settings.entry(k[0])) is not None and
                   k[2] in (e.env_names if k[1] == "env" else e.header_names)}
        for (server, kind, name), value in list(secrets.items()):
            stored = self._stored_as.get(server, server)
            if value == config.KEPT and stored != server:  # renamed: the value moves
                secrets[(server, kind, name)] = keys.get(
                    config.secret_name(stored, kind, name)) or ""
        session_only = config.save(self.service.store, settings, secrets)
        if session_only:
            QMessageBox.information(self, "MCP servers", "No system keyring here: "
                                    f"{', '.join(session_only)} are kept for this session only.")
        self.service.configure(settings)
        self.saved.emit(settings)
        self.accept()
