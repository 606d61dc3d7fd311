"""Engine > Remote lanes…: OpenAI-compatible servers (another Tandem, vLLM,
llama.cpp's server, LM Studio, Ollama) that the router may send whole
requests to. The list is kept in the chat database (addresses, model names,
which local model each serves; never a key); API keys live in the OS keyring
(app/connections/keys.py), or for this session only where there is none, and the user is
told. Every loaded engine gets the enabled remotes (`apply_remotes`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (QCheckBox, QDialog, QDialogButtonBox, QFormLayout, QHBoxLayout,
                               QLabel, QLineEdit, QListWidget, QListWidgetItem, QPushButton,
                               QVBoxLayout)

from engine import EngineError, RemoteSpec

from app.connections import keys

SETTING = "remote.lanes"
MAX_REMOTES = 8


def key_name(name: str) -> str:
    return f"remote:{name}"


@dataclass
class SavedRemote:
    name: str
    url: str
    model: str = ""
    serves: str = ""  # '' = the same name as `model`
    allow_http: bool = False
    enabled: bool = True

    def spec(self) -> RemoteSpec:
        return RemoteSpec(self.url, self.model, name=self.name,
                          serves=self.serves or None, allow_http=self.allow_http)


def load_saved(store) -> list[SavedRemote]:
    """The saved remotes; an entry that is damaged or no longer valid is skipped."""
    saved = store.setting(SETTING) if store is not None else None
    out = []
    for item in saved if isinstance(saved, list) else []:
        if not isinstance(item, dict):
            continue
        try:
            remote = SavedRemote(**{k: item[k] for k in ("name", "url") if k in item},
                                 **{k: item[k] for k in ("model", "serves", "allow_http",
                                                         "enabled") if k in item})
            remote.spec()
        except (TypeError, EngineError):
            continue
        if remote.name not in {r.name for r in out}:
            out.append(remote)
    return out[:MAX_REMOTES]


def save(store, remotes: list[SavedRemote]) -> None:
    if store is not None:
        store.set_setting(SETTING, [asdict(r) for r in remotes])


def remote_model_spec(store, name: str):
    """(spec, key) of the saved remote `name`, to load its model as the
    window's model; or why not (a line)."""
    for remote in load_saved(store):
        if remote.name == name:
            return remote.spec(), keys.get(key_name(name))
    return f"There is no saved remote lane named {name!r} (Engine > Remote lanes…)."


def apply_remotes(store, engine) -> list[str]:
    """Give `engine` the enabled remotes; returns the problems, one line each."""
    if not engine.capabilities.remote_lanes:
        return []  # the model itself runs remotely, say: nothing to route
    problems = []
    for remote in load_saved(store):
        if not remote.enabled:
            continue
        try:
            engine.add_remote(remote.spec(), keys.get(key_name(remote.name)))
        except EngineError as e:
            problems.append(f"Remote lane {remote.name}: {e}")
    return problems


class RemoteLanesDialog(QDialog):
    """The list of remotes and a form to add one; OK applies it to the engine
    (then `applied(engine)`: its lanes changed)."""

    applied = Signal(object)

    def __init__(self, window):
        super().__init__(window)
        self.setWindowTitle("Remote lanes")
        self.setMinimumWidth(560)
        self.window_ = window
        self.remotes = load_saved(window.store)
        self.list = QListWidget()
        self.remove_button = QPushButton("Remove")
        self.remove_button.clicked.connect(self._remove)
        self.use_button = QPushButton("Use as the model")
        self.use_button.setToolTip("Chat with the model this server runs, on the server "
                                   "(for a model too big for this machine)")
        self.use_button.clicked.connect(self._use)
        form = self._form()
        self.url.textChanged.connect(self._check_http)
        where = QLabel(keys.where("after a restart, type it again."))
        where.setWordWrap(True)
        note = QLabel("The router sends a remote whole requests when it predicts it finishes "
                      "them sooner (Hybrid mode), keeps a chat there while its cache holds it, "
                      "and goes on locally from what it received if the remote fails. A "
                      "remote is used only for the model it serves.")
        note.setWordWrap(True)
        add_row = QHBoxLayout()
        add_row.addStretch(1)
        add_row.addWidget(self.add_button)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.list)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.use_button)
        row.addWidget(self.remove_button)
        layout.addLayout(row)
        layout.addLayout(form)
        layout.addLayout(add_row)
        layout.addWidget(self.error)
        layout.addWidget(where)
        layout.addWidget(note)
        layout.addWidget(buttons)
        self._removed: list[str] = []
        self._added: dict[str, str] = {}  # name -> key typed for it
        self._fill()

    def _form(self) -> QFormLayout:
        """Address, model, what it serves, key: a new remote lane."""
        self.url = QLineEdit()
        self.url.setPlaceholderText("https://gpu-box.example:8000/v1")
        self.model = QLineEdit()
        self.model.setPlaceholderText("the server's model id (empty: the first it lists)")
        self.serves = QLineEdit()
        self.serves.setPlaceholderText("the local model it serves (empty: the same name)")
        self.key = QLineEdit()
        self.key.setEchoMode(QLineEdit.Password)
        self.key.setPlaceholderText("API key, if the server needs one")
        self.plain_http = QCheckBox("Send prompts and the key over plain http to this "
                                    "address (readable on the network)")
        self.plain_http.setVisible(False)
        self.add_button = QPushButton("Add")
        self.add_button.clicked.connect(self._add)
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setTextFormat(self.error.textFormat().PlainText)
        form = QFormLayout()
        form.addRow("Address", self.url)
        form.addRow("Model", self.model)
        form.addRow("Serves", self.serves)
        form.addRow("API key", self.key)
        form.addRow("", self.plain_http)
        return form

    def _fill(self) -> None:
        self.list.clear()
        engine = self.window_.engine
        states = engine.describe_lanes() if engine is not None else {}
        for remote in self.remotes:
            state = states.get(remote.name, "added when OK is pressed")
            item = QListWidgetItem(f"{remote.name}: {remote.url} · {remote.model or 'model'}"
                                   f" — {state}")
            item.setToolTip(state)
            self.list.addItem(item)
        self.remove_button.setEnabled(bool(self.remotes))
        self.use_button.setEnabled(bool(self.remotes))
        if self.remotes and self.list.currentRow() < 0:
            self.list.setCurrentRow(len(self.remotes) - 1)

    def _check_http(self) -> None:
        try:
            RemoteSpec(self.url.text().strip() or "https://x/v1")
            self.plain_http.setVisible(False)
        except EngineError as e:
            self.plain_http.setVisible(e.kind == "insecure-remote")

    def _free_name(self) -> str:
        taken = {r.name for r in self.remotes}
        if self.window_.engine is not None:
            taken |= {lane.name for lane in self.window_.engine.lane_info()}
        return next(n for n in ("remote", *(f"remote{i}" for i in range(2, 100)))
                    if n not in taken)

    def _add(self) -> bool:
        if len(self.remotes) >= MAX_REMOTES:
            self.error.setText(f"At most {MAX_REMOTES} remote lanes.")
            return False
        remote = SavedRemote(self._free_name(), self.url.text().strip(),
                             self.model.text().strip(), self.serves.text().strip(),
                             not self.plain_http.isHidden() and self.plain_http.isChecked())
        try:
            remote.url = remote.spec().url
        except EngineError as e:
            self.error.setText(str(e))
            return False
        self.error.setText("")
        self.remotes.append(remote)
        self._added[remote.name] = self.key.text()
        for field in (self.url, self.model, self.serves, self.key):
            field.clear()
        self._fill()
        return True

    def _use(self) -> None:
        """Save the list, then load the selected remote's model as the window's."""
        row = self.list.currentRow()
        if not 0 <= row < len(self.remotes):
            return
        name = self.remotes[row].name
        self.accept()
        if self.result() == QDialog.Accepted:
            self.window_.load_model(f"remote:{name}")

    def _remove(self) -> None:
        row = self.list.currentRow()
        if 0 <= row < len(self.remotes):
            gone = self.remotes.pop(row)
            self._removed.append(gone.name)
            self._added.pop(gone.name, None)
            self._fill()

    def accept(self) -> None:
        """Save the list, keep the keys, and apply the changes to the engine."""
        if self.url.text().strip() and not self._add():
            return  # a half-typed remote that is not valid: say why, stay open
        window = self.window_
        session_only = False
        for name in self._removed:
            keys.forget(key_name(name))
            if window.engine is not None:
                window.engine.remove_remote(name)
        for name, key in self._added.items():
            if key:
                session_only |= not keys.put(key_name(name), key)
        save(window.store, self.remotes)
        problems = []
        if window.engine is not None:
            for remote in self.remotes:
                if remote.name in self._added:
                    try:
                        window.engine.add_remote(remote.spec(), keys.get(key_name(remote.name)))
                    except EngineError as e:
                        problems.append(f"{remote.name}: {e}")
            self.applied.emit(window.engine)  # the window shows the new lanes
        if session_only:
            problems.append("No system keyring: the key is kept for this session only.")
        if problems:
            window.statusBar().showMessage(" ".join(problems), 15_000)
        super().accept()


def open_remote_lanes(window, applied=None) -> RemoteLanesDialog:
    """The dialog, open; `applied(engine)` when it applies lanes."""
    dialog = RemoteLanesDialog(window)
    if applied is not None:
        dialog.applied.connect(applied)
    dialog.open()
    return dialog
