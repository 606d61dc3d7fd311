"""A chat's own settings: its system prompt and how its answers are sampled.

A chat follows the loaded model's sampling defaults (engine/models/
gendefaults.py) until one of its settings is changed; then they are stored
with the chat. "Model defaults" goes back to following the model.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (QDoubleSpinBox, QGridLayout, QLineEdit, QPushButton, QSpinBox,
                               QVBoxLayout, QWidget)

# key, integer?, minimum, maximum, step, initial value, prefix (in the row's order)
SPINS = (("temperature", False, 0.0, 2.0, 0.1, 0.0, "temperature "),
         ("top_p", False, 0.05, 1.0, 0.05, 1.0, "top-p "),
         ("top_k", True, 0, 1000, 1, 0, "top-k "),
         ("min_p", False, 0.0, 1.0, 0.01, 0.0, "min-p "),
         ("repetition_penalty", False, 1.0, 2.0, 0.05, 1.0, "repeat penalty "),
         ("max_tokens", True, 1, 32768, 1, 1024, "max tokens "))


def _spin(integer: bool, low, high, step, value, prefix: str):
    spin = QSpinBox() if integer else QDoubleSpinBox()
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
        self.spins = {key: _spin(*spec) for key, *spec in SPINS}
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

    def stored(self) -> dict:
        """What is stored with the chat: nothing while it follows the model."""
        return {} if self.follows_model else self.sampling()

    def apply(self, system_prompt: str, params: dict) -> None:
        """The chat's stored settings; none: it follows the model's defaults."""
        self.system_prompt.setText(system_prompt)
        self.follows_model = not params
        self.show_sampling(params)

    def apply_model_defaults(self, defaults: dict) -> None:
        """The loaded model's sampling defaults, if this chat follows them."""
        if self.follows_model:
            self.show_sampling(defaults)

    def show_sampling(self, params: dict) -> None:
        for key, spin in self.spins.items():
            if key in params:
                spin.blockSignals(True)
                spin.setValue(params[key])
                spin.blockSignals(False)
