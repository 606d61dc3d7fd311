"""A chat's own settings: its system prompt and how its answers are sampled.

A chat follows the loaded model's sampling defaults (engine/models/
gendefaults.py) until one of its settings is changed; then they are stored
with the chat. "Model defaults" goes back to following the model.

Its answers can be asked to be JSON: any JSON object, or JSON matching a
schema pasted here; the engine enforces it token by token (constrained
decoding) and the chat shows the answer formatted. That choice is stored
with the chat whatever the sampling settings follow, and so is "Drafts":
auto lets the engine verify tokens the chat's own text predicts several at a
time where that pays (the answer is the same either way), "with <model>"
has a smaller model of the same family propose them (the library's models
that can: app/models/draft_models.py), off never drafts.
"""

from __future__ import annotations

import json

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (QComboBox, QDoubleSpinBox, QGridLayout, QLabel, QLineEdit,
                               QPlainTextEdit, QPushButton, QSpinBox, QVBoxLayout, QWidget)

from engine import EngineError, Grammar

from app.store.chat_json import PARAMS

FORMATS = (("text", "Answer: text"), ("json_object", "Answer: JSON"),
           ("json_schema", "Answer: JSON matching a schema"))
DRAFTS = (("auto", "Drafts: auto"), ("off", "Drafts: off"))
SCHEMA_EXAMPLE = ('{"type": "object", "properties": {"name": {"type": "string"}, '
                  '"age": {"type": "integer"}}, "required": ["name", "age"]}')

# key, step, initial value, prefix (in the row's order); the type and range of
# each are PARAMS', which an imported chat is held to as well.
SPINS = (("temperature", 0.1, 0.0, "temperature "),
         ("top_p", 0.05, 1.0, "top-p "),
         ("top_k", 1, 0, "top-k "),
         ("min_p", 0.01, 0.0, "min-p "),
         ("repetition_penalty", 0.05, 1.0, "repeat penalty "),
         ("max_tokens", 1, 1024, "max tokens "))


def _spin(key: str, step, value, prefix: str):
    kind, low, high = PARAMS[key]
    spin = QSpinBox() if kind is int else QDoubleSpinBox()
    spin.setRange(low, high)
    spin.setSingleStep(step)
    spin.setValue(value)
    spin.setPrefix(prefix)
    return spin


class ChatSettings(QWidget):
    """The system prompt on one row, the sampling settings on the next."""

    changed = Signal()  # edited by the user (or "Model defaults" pressed)
    model_defaults_requested = Signal()  # "Model defaults": show the model's again

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.system_prompt = QLineEdit()
        self.system_prompt.setPlaceholderText("System prompt (empty: the model's default)")
        self.spins = {key: _spin(key, *spec) for key, *spec in SPINS}
        self.spins["top_k"].setSpecialValueText("top-k off")
        self.model_defaults_button = QPushButton("Model defaults")
        self.model_defaults_button.setToolTip(
            "Sample as the model's own defaults say (generation_config.json or GGUF metadata, "
            "else Tandem's); a new chat does until you change a setting")
        self.model_defaults_button.clicked.connect(self._use_model_defaults)
        self.follows_model = True
        rows = QVBoxLayout(self)
        rows.setContentsMargins(0, 0, 0, 0)
        rows.addWidget(self.system_prompt)
        # Three to a row: one row of six (and the button) made the chat at
        # least 856 px wide, wider than the window leaves it beside the docks.
        grid = QGridLayout()
        rows.addLayout(grid)
        for i, spin in enumerate(self.spins.values()):
            grid.addWidget(spin, i // 3, i % 3)
            spin.valueChanged.connect(lambda _=None: self._user_changed())
        grid.addWidget(self.model_defaults_button, 0, 3)
        grid.setColumnStretch(4, 1)
        self.system_prompt.editingFinished.connect(self.changed.emit)
        self.format = QComboBox()
        for key, label in FORMATS:
            self.format.addItem(label, key)
        self.format.setToolTip("Ask for JSON: the answer is held to it token by token "
                               "(constrained decoding) and shown formatted")
        self.schema = QPlainTextEdit()
        self.schema.setPlaceholderText(f"A JSON schema, e.g. {SCHEMA_EXAMPLE}")
        self.schema.setMaximumHeight(90)
        self.schema_error = QLabel("")
        self.schema_error.setTextFormat(self.schema_error.textFormat().PlainText)
        self.schema_error.setWordWrap(True)
        grid.addWidget(self.format, 2, 0, 1, 2)
        self.drafts = QComboBox()
        for key, label in DRAFTS:
            self.drafts.addItem(label, key)
        self.drafts.setToolTip(
            "Drafts: the engine proposes tokens the chat's own text predicts (a passage "
            "being quoted or edited, code being copied), or a smaller model of the same "
            "family guesses them, and the model checks several in one step. The answer "
            "is the same either way; auto drafts where it pays, off never does.")
        self.drafts.currentIndexChanged.connect(lambda _=None: self.changed.emit())
        grid.addWidget(self.drafts, 2, 2)
        rows.addWidget(self.schema)
        rows.addWidget(self.schema_error)
        self._show_schema()
        self.format.currentIndexChanged.connect(self._format_changed)
        self.schema.textChanged.connect(self._schema_changed)

    def _format_changed(self) -> None:
        self._show_schema()
        self.changed.emit()

    def _schema_changed(self) -> None:
        self._check_schema()
        self.changed.emit()

    def _show_schema(self) -> None:
        schema = self.format.currentData() == "json_schema"
        self.schema.setVisible(schema)
        self.schema_error.setVisible(schema)
        self._check_schema()

    def _check_schema(self) -> None:
        try:
            self.grammar()
            self.schema_error.setText("")
        except ValueError as e:
            self.schema_error.setText(f"⚠ {e}")

    def answer_format(self) -> dict | None:
        """What is stored: None (text), {"type": "json_object"}, or
        {"type": "json_schema", "schema": "<the text as typed>"}."""
        kind = self.format.currentData()
        if kind == "json_object":
            return {"type": kind}
        if kind == "json_schema":
            return {"type": kind, "schema": self.schema.toPlainText()}
        return None

    def grammar(self) -> Grammar | None:
        """The grammar answers must match; ValueError says what is wrong with
        the schema typed (the engine checks the rest when it is sent)."""
        kind = self.format.currentData()
        if kind == "json_object":
            return Grammar("json_schema", '{"type": "object"}')
        if kind != "json_schema":
            return None
        text = self.schema.toPlainText().strip()
        if not text:
            raise ValueError("Paste a JSON schema, or ask for any JSON.")
        try:
            schema = json.loads(text)
        except ValueError as e:
            raise ValueError(f"The schema is not valid JSON: {e}") from None
        if not isinstance(schema, dict):
            raise ValueError("A JSON schema is an object: {...}.")
        try:
            return Grammar("json_schema", json.dumps(schema))
        except EngineError as e:
            raise ValueError(str(e)) from None

    def _user_changed(self) -> None:
        self.follows_model = False
        self.changed.emit()

    def _use_model_defaults(self) -> None:
        self.follows_model = True
        self.changed.emit()  # stored as "no settings of its own"
        self.model_defaults_requested.emit()

    def sampling(self) -> dict:
        """The sampling settings, as shown."""
        return {key: (spin.value() if isinstance(spin, QSpinBox) else round(spin.value(), 3))
                for key, spin in self.spins.items()}

    def set_draft_models(self, models: list[tuple[str, str]]) -> None:
        """The models that can draft for the loaded one, as (source, name):
        one "Drafts: with <name>" item each; the chat's choice stays chosen
        (listed as it was stored when the library no longer has it)."""
        chosen = self.drafts.currentData()
        self.drafts.blockSignals(True)
        while self.drafts.count() > len(DRAFTS):
            self.drafts.removeItem(len(DRAFTS))
        for source, name in models:
            self.drafts.addItem(f"Drafts: with {name}", f"model:{source}")
        self._choose_drafts(chosen)
        self.drafts.blockSignals(False)

    def _choose_drafts(self, key: str | None) -> None:
        if isinstance(key, str) and key.startswith("model:") and self.drafts.findData(key) < 0:
            self.drafts.addItem(f"Drafts: with {key[6:]}", key)
        at = self.drafts.findData(key)
        self.drafts.setCurrentIndex(at if at >= 0 else 0)

    def draft_model(self) -> str | None:
        """The source of the draft model this chat drafts with, if any."""
        key = self.drafts.currentData()
        return key[6:] if isinstance(key, str) and key.startswith("model:") else None

    def request_extras(self) -> dict:
        """SamplingParams fields this row sets beside the sampling ones."""
        if self.drafts.currentData() == "off":
            return {"draft_tokens": 0}
        return {"drafter": "model"} if self.draft_model() else {}

    def stored(self) -> dict:
        """What is stored with the chat: its answer format and drafts choice
        (when not the default), and no sampling settings while it follows
        the model."""
        stored = {} if self.follows_model else self.sampling()
        fmt = self.answer_format()
        if fmt:
            stored["answer_format"] = fmt
        if self.drafts.currentData() != "auto":
            stored["drafts"] = self.drafts.currentData()
        return stored

    def apply(self, system_prompt: str, params: dict) -> None:
        """The chat's stored settings; none: it follows the model's defaults."""
        self.system_prompt.setText(system_prompt)
        params = dict(params)
        fmt = params.pop("answer_format", None)
        drafts = params.pop("drafts", None)
        self.drafts.blockSignals(True)
        self._choose_drafts(drafts if drafts == "off" or (
            isinstance(drafts, str) and drafts.startswith("model:")) else "auto")
        self.drafts.blockSignals(False)
        self.follows_model = not params
        self.show_sampling(params)
        self.format.blockSignals(True)
        self.schema.blockSignals(True)
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        index = self.format.findData(kind if kind in ("json_object", "json_schema") else "text")
        self.format.setCurrentIndex(index)
        schema = fmt.get("schema") if isinstance(fmt, dict) else None
        self.schema.setPlainText(schema if isinstance(schema, str) else "")
        self.format.blockSignals(False)
        self.schema.blockSignals(False)
        self._show_schema()

    def apply_model_defaults(self, defaults: dict) -> None:
        """The loaded model's sampling defaults, if this chat follows them."""
        if self.follows_model:
            self.show_sampling(defaults)

    def show_sampling(self, params: dict) -> None:
        for key, spin in self.spins.items():
            value = params.get(key)
            # A database from before imports were checked may hold anything:
            # a number is held to the box's range, anything else left out
            # (setValue raises OverflowError on 1e308 and takes NaN).
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                continue
            value = min(max(value, spin.minimum()), spin.maximum())
            spin.blockSignals(True)
            spin.setValue(int(value) if isinstance(spin, QSpinBox) else float(value))
            spin.blockSignals(False)
