"""Downloading a model from the Hugging Face Hub with byte progress and a
cancel button (the model library, app/models/model_library.py, starts it)."""

from __future__ import annotations

import threading
from pathlib import Path

from PySide6.QtCore import QObject, Signal

MODEL_FILES = ["*.json", "*.safetensors", "*.py", "tokenizer.model", "*.tiktoken", "*.txt",
               "*.jinja"]


OFFLINE = ("Offline: the Hugging Face Hub cannot be reached from this machine (no network, "
           "or its name does not resolve). Models already on disk still load (Engine > "
           "Load model…).")


def offline_reason(exc: BaseException) -> str | None:
    """The plain message for an error that means "no network" (a name that
    does not resolve, a refused or timed-out connection), else None."""
    import socket

    import requests

    seen, e = set(), exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, (socket.gaierror, ConnectionError, TimeoutError,
                          requests.ConnectionError, requests.Timeout)):
            return OFFLINE
        text = str(e)
        if "Name or service not known" in text or "nodename nor servname" in text or \
                "Temporary failure in name resolution" in text or "offline mode" in text:
            return OFFLINE
        e = e.__cause__ or e.__context__
    return None


def hub_reachable(endpoint: str | None, timeout: float = 5.0) -> bool:
    """One quick request to the Hub: huggingface_hub's own calls retry for
    ~25 s when it cannot be reached, too long to say "offline"."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    if constants.HF_HUB_OFFLINE:
        return False
    try:
        get_session().head(endpoint or constants.ENDPOINT, timeout=timeout)
    except Exception as e:
        return offline_reason(e) is None  # an answer of any kind means it is reachable
    return True


GGUF_PREFERENCE = ("Q4_K_M", "Q4_K_S", "Q5_K_M", "Q5_K_S", "Q6_K", "Q8_0", "Q4_0", "Q4_1")


def pick_gguf(files: list[str]) -> str | None:
    """The .gguf of a GGUF repo to download: the most common 4-bit K-quant
    first (the best size/quality trade for 1-8B models), then larger ones."""
    ggufs = [f for f in files if f.lower().endswith(".gguf") and "mmproj" not in f.lower()]
    for quant in GGUF_PREFERENCE:
        for name in ggufs:
            if quant.lower() in name.lower():
                return name
    return ggufs[0] if ggufs else None


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
        self._lock = threading.Lock()  # the byte count, from the download threads
        self._done = self._total = 0  # KiB

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
                    # Several download threads update the bar: what one emits
                    # may arrive after a later count, so the count only grows.
                    with download._lock:
                        done = download._done = max(download._done, int(self.n) >> 10)
                        total = download._total = max(download._total, int(self.total) >> 10)
                    download._emit(download.progress, done, total)
                return result

        try:
            from huggingface_hub import HfApi

            if not hub_reachable(self.endpoint):
                self._emit(self.failed, OFFLINE)
                return
            files = HfApi(endpoint=self.endpoint).list_repo_files(self.repo_id)
            gguf = None if "config.json" in files else pick_gguf(files)
            path = snapshot_download(self.repo_id, allow_patterns=[gguf] if gguf else MODEL_FILES,
                                     tqdm_class=Progress, endpoint=self.endpoint,
                                     cache_dir=self.cache_dir)
            if gguf:  # a GGUF repo: one file of it, the one a 16-32 GB machine wants
                path = str(Path(path) / gguf)
        except DownloadCancelled:
            self._emit(self.failed, "Download cancelled.")
        except Exception as e:  # offline, no such repo, disk full...
            if self._cancel.is_set():
                self._emit(self.failed, "Download cancelled.")
            else:
                self._emit(self.failed, offline_reason(e) or
                           f"Cannot download {self.repo_id}: {e}")
        else:
            # huggingface_hub reads 10 MB chunks: Cancel pressed during the last
            # one still means "do not load it".
            if self._cancel.is_set():
                self._emit(self.failed, "Download cancelled.")
            else:
                if self._total:  # all of it: the last word on the bar, whatever came late
                    self._emit(self.progress, self._total, self._total)
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


class HubSearch(QObject):
    """Searches the Hub for models Tandem can load (MLX folders and GGUF files)
    on a worker thread; `found(list of dicts)` or `failed(message)`."""

    found = Signal(object)
    failed = Signal(str)

    def __init__(self, parent: QObject | None = None, endpoint: str | None = None):
        super().__init__(parent)
        self.endpoint = endpoint

    def start(self, text: str) -> None:
        threading.Thread(target=self._run, args=(text,), name="hub-search", daemon=True).start()

    def _run(self, text: str) -> None:
        from huggingface_hub import constants
        from huggingface_hub.hf_api import ModelInfo
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        try:
            if constants.HF_HUB_OFFLINE:
                raise RuntimeError("offline mode is on (HF_HUB_OFFLINE)")
            if not hub_reachable(self.endpoint):
                raise ConnectionError("the Hub cannot be reached")
            # One request with a timeout: HfApi.list_models retries for ~25 s
            # when the Hub cannot be reached, too long for a search box.
            response = get_session().get(
                f"{self.endpoint or constants.ENDPOINT}/api/models", timeout=15,
                headers=build_hf_headers(),
                params={"search": text, "limit": 50, "sort": "downloads",
                        "expand": ["usedStorage", "downloads", "tags"]})
            hf_raise_for_status(response)
            rows = []
            for m in (ModelInfo(**item) for item in response.json()):
                tags = set(m.tags or [])
                kind = "GGUF" if "gguf" in tags else "MLX" if ("mlx" in tags or m.id.startswith(
                    "mlx-community/")) else None
                if kind:  # what Tandem can load
                    rows.append({"id": m.id, "kind": kind, "bytes": m.used_storage or 0,
                                 "downloads": m.downloads or 0})
        except Exception as e:  # offline, rate-limited, bad endpoint...
            self._emit(self.failed, offline_reason(e) or f"Cannot search the Hub: {e}")
        else:
            self._emit(self.found, rows)

    def _emit(self, signal, *args) -> None:
        try:
            signal.emit(*args)
        except RuntimeError:  # the dialog was closed meanwhile
            pass
