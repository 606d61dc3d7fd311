"""The model library: the models on disk (the bundled default, the Hugging Face
cache, files and folders the user added), what each is, and whether it fits
this machine, with Load, Add, Reveal, Remove and Delete; and a Hugging Face
repo id to download (with byte progress and Cancel, app/models/download.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from PySide6.QtCore import QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (QAbstractItemView, QDialog, QFileDialog, QHBoxLayout, QHeaderView,
                               QLabel, QLineEdit, QMessageBox, QPushButton, QTableWidget,
                               QTableWidgetItem, QVBoxLayout, QWidget)

from engine import format_bytes
from engine.models.catalog import (ModelEntry, describe_folder, describe_gguf, hub_cache_models,
                                   judge)

ADDED_KEY = "library.added"  # paths the user added, in the settings table
COLUMNS = ["Model", "Family", "Parameters", "Quantization", "Size", "Context", "On this machine"]


def describe_path(path: Path, origin: str = "added", name: str | None = None) -> ModelEntry:
    if path.suffix.lower() == ".gguf":
        return describe_gguf(path, origin, name)
    return describe_folder(path, origin, name)


def library_entries(store, default_path: Path | None,
                    hub_cache: str | None = None) -> list[ModelEntry]:
    """The models on disk the library lists: the bundled one, the Hugging
    Face cache's, and what the user added."""
    entries = []
    if default_path is not None and default_path.exists():
        entries.append(describe_gguf(default_path, "bundled", "SmolLM2-135M-Instruct (bundled)"))
        entries[-1].source = "default"
    entries += hub_cache_models(hub_cache)
    for path in store.setting(ADDED_KEY, []) or []:
        entries.append(describe_path(Path(path)))
    return entries


def _count(n: int) -> str:
    for unit, size in (("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n) if n else "?"


class ModelLibrary(QDialog):
    """Emits `load_requested(source)` or `download_requested(repo_id)`."""

    load_requested = Signal(str)
    download_requested = Signal(str)

    def __init__(self, store, budget_bytes: int, has_gpu: bool, default_path: Path | None,
                 parent: QWidget | None = None, hub_cache: str | None = None,
                 hub_endpoint: str | None = None, cpu_matmul: str | None = None):
        super().__init__(parent)
        self.setWindowTitle("Model library")
        self.resize(980, 460)
        self.store, self.budget_bytes, self.has_gpu = store, budget_bytes, has_gpu
        self.cpu_matmul = cpu_matmul  # the loaded engine's probe
        self.default_path, self.hub_cache = default_path, hub_cache
        self.entries: list[ModelEntry] = []
        self.table = self._models_table()
        self.detail = QLabel("")
        self.detail.setWordWrap(True)
        self.buttons = {}
        row = self._model_buttons()
        hub_row = self._hub_search(hub_endpoint)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.detail)
        layout.addLayout(row)
        layout.addLayout(hub_row)
        layout.addWidget(self.results)
        layout.addWidget(self.hub_status)
        self.refresh()

    def _models_table(self) -> QTableWidget:
        """The models on disk, a row each; a double click loads one."""
        table = QTableWidget(0, len(COLUMNS))
        table.setHorizontalHeaderLabels(COLUMNS)
        table.setSelectionBehavior(QAbstractItemView.SelectRows)
        table.setSelectionMode(QAbstractItemView.SingleSelection)
        table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        table.verticalHeader().setVisible(False)
        header = table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.Stretch)
        for col in range(1, len(COLUMNS)):
            header.setSectionResizeMode(col, QHeaderView.ResizeToContents)
        table.itemSelectionChanged.connect(self._on_selection)
        table.itemDoubleClicked.connect(lambda _: self._load())
        return table

    def _model_buttons(self) -> QHBoxLayout:
        """Load, Add, Reveal, Remove and Delete, in `buttons`."""
        row = QHBoxLayout()
        for key, label, slot in (("load", "Load", self._load),
                                 ("add_file", "Add .gguf file…", self._add_file),
                                 ("add_folder", "Add folder…", self._add_folder),
                                 ("reveal", "Reveal", self._reveal),
                                 ("remove", "Remove from list", self._remove),
                                 ("delete", "Delete from disk…", self._delete)):
            button = QPushButton(label)
            button.setAutoDefault(False)  # Enter in the Hub search box searches, never loads
            button.clicked.connect(slot)
            self.buttons[key] = button
            row.addWidget(button)
        row.addStretch(1)
        return row

    def _hub_search(self, hub_endpoint: str | None) -> QHBoxLayout:
        """The Hub: search MLX and GGUF repos (with sizes), or type a repo id;
        its results table and status line (laid out below the row returned)."""
        self.repo_id = QLineEdit()
        self.repo_id.setPlaceholderText("Search the Hugging Face Hub, or a repo id: "
                                        "mlx-community/Qwen2.5-0.5B-Instruct-4bit")
        self.repo_id.returnPressed.connect(self._search)
        search = QPushButton("Search the Hub")
        search.setAutoDefault(False)
        search.clicked.connect(self._search)
        download = QPushButton("Download")
        download.setAutoDefault(False)
        download.clicked.connect(self._download)
        self.buttons["search"], self.buttons["download"] = search, download
        hub_row = QHBoxLayout()
        hub_row.addWidget(self.repo_id, 1)
        hub_row.addWidget(search)
        hub_row.addWidget(download)
        self.results = QTableWidget(0, 4)
        self.results.setHorizontalHeaderLabels(["Hub repo", "Kind", "Size", "Downloads"])
        self.results.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.results.setSelectionMode(QAbstractItemView.SingleSelection)
        self.results.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.results.verticalHeader().setVisible(False)
        self.results.horizontalHeader().setSectionResizeMode(0, QHeaderView.Stretch)
        self.results.itemDoubleClicked.connect(lambda _: self._download())
        self.results.hide()
        self.hub_status = QLabel("")
        from app.models.download import HubSearch

        self._search_job = HubSearch(self, endpoint=hub_endpoint)
        self._search_job.found.connect(self._show_results)
        self._search_job.failed.connect(self.hub_status.setText)
        return hub_row

    # ---- listing ----------------------------------------------------------
    def refresh(self) -> None:
        entries = library_entries(self.store, self.default_path, self.hub_cache)
        for entry in entries:
            judge(entry, self.budget_bytes, self.has_gpu,
                  cpu_matmul=self.cpu_matmul)
        self.entries = entries
        self.table.setRowCount(len(entries))
        for r, e in enumerate(entries):
            family = f"{e.family} · reads images" if e.reads_images else e.family
            cells = [e.name, family, _count(e.parameters), e.quantization,
                     format_bytes(e.file_bytes) if e.file_bytes else "?",
                     f"{e.context_length:,}" if e.context_length else "?", e.verdict]
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(e.verdict_detail if c == len(cells) - 1 else e.source)
                self.table.setItem(r, c, item)
        self._on_selection()

    def selected(self) -> ModelEntry | None:
        rows = self.table.selectionModel().selectedRows()
        return self.entries[rows[0].row()] if rows else None

    def select(self, source: str) -> None:
        for r, e in enumerate(self.entries):
            if e.source == source:
                self.table.selectRow(r)

    def _on_selection(self) -> None:
        entry = self.selected()
        for key in ("load", "reveal", "remove", "delete"):
            self.buttons[key].setEnabled(entry is not None)
        if entry is None:
            self.detail.setText("Select a model to see what its memory plan would be here.")
            return
        self.buttons["load"].setEnabled(entry.verdict not in ("cannot load", "does not fit"))
        self.buttons["remove"].setEnabled(entry.origin == "added")
        self.buttons["delete"].setEnabled(entry.origin != "bundled" and not entry.problem)
        self.detail.setText(f"{entry.verdict}: {entry.verdict_detail}")

    # ---- actions ------------------------------------------------------------
    def _load(self) -> None:
        entry = self.selected()
        if entry is not None and self.buttons["load"].isEnabled():
            self.load_requested.emit(entry.source)
            self.accept()

    def add(self, path: str) -> None:
        added = list(self.store.setting(ADDED_KEY, []) or [])
        if path not in added:
            self.store.set_setting(ADDED_KEY, added + [path])
        self.refresh()
        self.select(path)

    def _add_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Add a GGUF model", "", "GGUF (*.gguf)")
        if path:
            self.add(path)

    def _add_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Add a model folder")
        if path:
            self.add(path)

    def _reveal(self) -> None:
        entry = self.selected()
        if entry is not None:
            path = Path(self.default_path if entry.source == "default" else entry.source)
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(path.parent if path.is_file()
                                                            else path)))

    def _remove(self) -> None:
        entry = self.selected()
        if entry is not None and entry.origin == "added":
            added = [p for p in self.store.setting(ADDED_KEY, []) or [] if p != entry.source]
            self.store.set_setting(ADDED_KEY, added)
            self.refresh()

    def _delete(self) -> None:
        entry = self.selected()
        if entry is None or entry.origin == "bundled":
            return
        target = _deletion_target(entry)
        refusal = _why_not_delete(entry, target)
        if refusal:
            QMessageBox.information(self, "Delete model", refusal)
            return
        answer = QMessageBox.question(
            self, "Delete model",
            f"Delete {entry.name} ({format_bytes(entry.file_bytes)}) from disk?\n\n{target}\n\n"
            "This cannot be undone.", QMessageBox.Yes | QMessageBox.Cancel, QMessageBox.Cancel)
        if answer != QMessageBox.Yes:
            return
        try:
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink()
        except OSError as e:
            QMessageBox.warning(self, "Delete model", f"Could not delete {target}: {e}")
        if entry.origin == "added":
            added = [p for p in self.store.setting(ADDED_KEY, []) or [] if p != entry.source]
            self.store.set_setting(ADDED_KEY, added)
        self.refresh()

    def _search(self) -> None:
        text = self.repo_id.text().strip()
        if text:
            self.hub_status.setText(f"Searching the Hub for “{text}”…")
            self._search_job.start(text)

    def _show_results(self, rows: list[dict]) -> None:
        self.hub_results = rows
        self.results.setRowCount(len(rows))
        for r, row in enumerate(rows):
            cells = [row["id"], row["kind"], format_bytes(row["bytes"]) if row["bytes"] else "?",
                     f"{row['downloads']:,}"]
            for c, text in enumerate(cells):
                self.results.setItem(r, c, QTableWidgetItem(text))
        self.results.setVisible(bool(rows))
        self.hub_status.setText(f"{len(rows)} MLX or GGUF models found; select one and "
                                "Download." if rows else "No MLX or GGUF model matches.")

    def _download(self) -> None:
        rows = self.results.selectionModel().selectedRows() if not self.results.isHidden() else []
        repo = self.hub_results[rows[0].row()]["id"] if rows else self.repo_id.text().strip()
        if repo and "/" in repo:
            self.download_requested.emit(repo)
            self.accept()
        elif repo:
            self.hub_status.setText("Search first, or type a whole repo id (owner/name).")


def library_for(parent, store, session, **kwargs) -> ModelLibrary:
    """`session`'s model library, judged against this machine's memory now:
    available memory plus the current model's weights (loading another model
    replaces it)."""
    import psutil

    from engine.models.loader import default_model_path

    budget, has_gpu, engine = psutil.virtual_memory().available, False, session.engine
    cpu_matmul = None
    if engine is not None:
        plan = engine.memory_plan
        budget += plan.shared_weight_bytes + sum(lp.weight_bytes for lp in plan.lanes)
        has_gpu = any(lp.device == "gpu" for lp in plan.lanes)
        cpu_matmul = plan.cpu_matmul
    try:
        default = default_model_path()
    except Exception:  # this copy has no bundled model
        default = None
    library = ModelLibrary(store, budget, has_gpu, default, parent,
                           cpu_matmul=cpu_matmul, **kwargs)
    library.load_requested.connect(session.load)
    library.download_requested.connect(lambda repo_id: session.download(repo_id, parent))
    if engine is not None:
        library.select(engine.model_info.source)
    return library


MODEL_SUFFIXES = {".json", ".safetensors", ".gguf", ".model", ".tiktoken", ".txt", ".md",
                  ".py", ".jinja", ".bin", ".gitattributes"}


def _why_not_delete(entry: ModelEntry, target: Path) -> str | None:
    """Deleting is for models only: a folder someone added that also holds
    other things (their documents, a project) is never removed."""
    if entry.problem:
        return f"{target} is not a model Tandem can read, so it is not deleted from here."
    if entry.origin == "added" and target.is_dir():
        others = [p.name for p in target.rglob("*")
                  if p.is_file() and p.suffix.lower() not in MODEL_SUFFIXES
                  and not p.name.startswith(".")]
        if others:
            return (f"{target} holds other files too ({', '.join(sorted(others)[:3])}…); "
                    "delete it yourself if you mean to. Remove from list keeps the files.")
    return None


def _deletion_target(entry: ModelEntry) -> Path:
    """What deleting removes: a hub-cache repo's whole cache folder, else the
    file or folder itself."""
    path = Path(entry.source)
    if entry.origin == "hub-cache":
        for parent in path.parents:
            if parent.name.startswith("models--"):
                return parent
    return path
