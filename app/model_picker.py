"""Choosing a model: the bundled default, a Hugging Face repo id (downloaded with
progress and a cancel button), or a local folder / GGUF file."""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import (QButtonGroup, QDialog, QDialogButtonBox, QFileDialog,
                               QHBoxLayout, QLineEdit, QPushButton, QRadioButton, QVBoxLayout,
                               QWidget)

MODEL_FILES = ["*.json", "*.safetensors", "*.py", "tokenizer.model", "*.tiktoken", "*.txt",
               "*.jinja"]


class ModelPicker(QDialog):
    """Returns a source for `Engine.load`: 'default', a repo id or a path."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Load model")
        self.default = QRadioButton("Bundled SmolLM2-135M-Instruct (works offline)")
        self.repo = QRadioButton("Hugging Face repo id")
        self.local = QRadioButton("Local folder or .gguf file")
        group = QButtonGroup(self)
        for button in (self.default, self.repo, self.local):
            group.addButton(button)
        self.default.setChecked(True)
        self.repo_id = QLineEdit()
        self.repo_id.setPlaceholderText("mlx-community/Qwen2.5-0.5B-Instruct-4bit")
        self.path = QLineEdit()
        browse_file = QPushButton("File…")
        browse_dir = QPushButton("Folder…")
        browse_file.clicked.connect(self._browse_file)
        browse_dir.clicked.connect(self._browse_dir)
        local_row = QHBoxLayout()
        local_row.addWidget(self.path, 1)
        local_row.addWidget(browse_file)
        local_row.addWidget(browse_dir)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.default)
        layout.addWidget(self.repo)
        layout.addWidget(self.repo_id)
        layout.addWidget(self.local)
        layout.addLayout(local_row)
        layout.addWidget(buttons)
        self.repo_id.textEdited.connect(lambda _: self.repo.setChecked(True))
        self.path.textEdited.connect(lambda _: self.local.setChecked(True))

    def source(self) -> str:
        if self.repo.isChecked() and self.repo_id.text().strip():
            return self.repo_id.text().strip()
        if self.local.isChecked() and self.path.text().strip():
            return self.path.text().strip()
        return "default"

    def is_download(self) -> bool:
        return self.repo.isChecked() and bool(self.repo_id.text().strip())

    def _browse_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "GGUF model", "", "GGUF (*.gguf)")
        if path:
            self.path.setText(path)
            self.local.setChecked(True)

    def _browse_dir(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Model folder")
        if path:
            self.path.setText(path)
            self.local.setChecked(True)


class DownloadCancelled(Exception):
    pass


class Download(QObject):
    """A Hugging Face snapshot download on a worker thread, with progress.

    `endpoint` and `cache_dir` default to huggingface_hub's own (HF_ENDPOINT,
    HF_HUB_CACHE); tests point them at a local stand-in for the Hub."""

    progress = Signal(int, int)  # KiB done, KiB total (Qt ints are 32-bit)
    finished = Signal(str)  # local path
    failed = Signal(str)

    def __init__(self, repo_id: str, parent: QObject | None = None,
                 endpoint: str | None = None, cache_dir: str | None = None):
        super().__init__(parent)
        self.repo_id = repo_id
        self.endpoint = endpoint
        self.cache_dir = cache_dir
        self._cancel = threading.Event()

    def cancel(self) -> None:
        self._cancel.set()

    def start(self) -> None:
        threading.Thread(target=self._run, name="model-download", daemon=True).start()

    def _run(self) -> None:
        from huggingface_hub import snapshot_download
        from tqdm.auto import tqdm

        download = self

        class Progress(tqdm):
            """huggingface_hub drives a files bar and byte bars through this
            class, from its download threads; the byte bars feed the dialog."""

            def update(self, n=1):
                if download._cancel.is_set():
                    raise DownloadCancelled()
                result = super().update(n)
                if self.unit == "B" and self.total:
                    download._emit(download.progress, int(self.n) >> 10, int(self.total) >> 10)
                return result

        try:
            path = snapshot_download(self.repo_id, allow_patterns=MODEL_FILES,
                                     tqdm_class=Progress, endpoint=self.endpoint,
                                     cache_dir=self.cache_dir)
        except DownloadCancelled:
            self._emit(self.failed, "Download cancelled.")
        except Exception as e:  # offline, no such repo, disk full...
            if self._cancel.is_set():
                self._emit(self.failed, "Download cancelled.")
            else:
                self._emit(self.failed, f"Cannot download {self.repo_id}: {e}")
        else:
            # huggingface_hub reads 10 MB chunks: Cancel pressed during the last
            # one still means "do not load it".
            if self._cancel.is_set():
                self._emit(self.failed, "Download cancelled.")
            else:
                self._emit(self.finished, path)

    def _emit(self, signal, *args) -> None:
        """Emit from the download thread unless the window (and this object
        with it) is gone: a closed window cancels, it does not crash."""
        try:
            signal.emit(*args)
        except RuntimeError:  # the C++ object was deleted
            self._cancel.set()


def start_download(parent, repo_id: str, on_done, on_failed, **hub) -> Download:
    """Run a `Download` behind a progress dialog with Cancel; call `on_done(path)`
    or `on_failed(message)` when it ends. `hub`: endpoint / cache_dir."""
    from PySide6.QtWidgets import QProgressDialog

    dialog = QProgressDialog(f"Downloading {repo_id}…", "Cancel", 0, 0, parent)
    dialog.setWindowTitle("Download model")
    dialog.setMinimumDuration(0)
    # Totals grow as huggingface_hub discovers files: reaching the current
    # maximum is not the end, so the dialog closes only when the download does.
    dialog.setAutoReset(False)
    dialog.setAutoClose(False)
    download = Download(repo_id, parent, **hub)
    download.progress.connect(lambda done, total: (dialog.setMaximum(total),
                                                   dialog.setValue(min(done, total))))

    def close_dialog():
        dialog.close()
        dialog.deleteLater()

    download.finished.connect(lambda path: (close_dialog(), on_done(path)))
    download.failed.connect(lambda message: (close_dialog(), on_failed(message)))
    dialog.canceled.connect(download.cancel)
    dialog.show()  # at once: resolving the repo can take a while before bytes flow
    download.start()
    return download
