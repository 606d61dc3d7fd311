"""The model library under offscreen Qt: what is on disk (bundled, Hugging Face
cache, added), each model's verdict for this machine, load, delete with a
confirmation, download, and a restart that remembers the model and the mode."""

import json
import shutil
import struct

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from app.models.model_library import ADDED_KEY, ModelLibrary
from engine import Engine, LaneSpec
from engine.models.loader import default_model_path, load_model
from tests.windows import open_window

GIB = 2**30


def _hub_cache(tmp_path, model_dir, repo="tandem-tests/tiny"):
    """A Hugging Face cache holding `model_dir` as `repo` (the cache's own layout)."""
    cache = tmp_path / "hub"
    snapshot = cache / f"models--{repo.replace('/', '--')}" / "snapshots" / ("a" * 40)
    shutil.copytree(model_dir, snapshot)
    refs = snapshot.parents[1] / "refs"
    refs.mkdir()
    (refs / "main").write_text("a" * 40)
    return cache


def _huge_model(path):
    """A model folder claiming a 70B-sized shape: a real header, a sparse file."""
    path.mkdir()
    config = {"model_type": "llama", "hidden_size": 8192, "num_hidden_layers": 80,
              "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 28672,
              "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}
    (path / "config.json").write_text(json.dumps(config))
    header = json.dumps({"model.embed_tokens.weight": {
        "dtype": "BF16", "shape": [128256, 8192], "data_offsets": [0, 128256 * 8192 * 2]}})
    with open(path / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header.encode())
        f.truncate(140 * GIB)  # sparse: no disk is used
    return path


@pytest.fixture
def window(qtbot, tiny_model_dir, tmp_path):
    w = open_window(qtbot, tiny_model_dir, tmp_path / "lib.db")
    yield w
    w.close()


def _library(qtbot, window, tmp_path, tiny_model_dir, budget=16 * GIB):
    cache = _hub_cache(tmp_path, tiny_model_dir)
    window.store.set_setting(ADDED_KEY, [str(_huge_model(tmp_path / "huge"))])
    library = ModelLibrary(window.store, budget, False, default_model_path(), window,
                           hub_cache=str(cache))
    qtbot.addWidget(library)
    return library


def test_the_library_lists_what_is_on_disk_with_verdicts(qtbot, window, tmp_path,
                                                         tiny_model_dir):
    library = _library(qtbot, window, tmp_path, tiny_model_dir)
    rows = {e.name: e for e in library.entries}
    bundled = rows["SmolLM2-135M-Instruct (bundled)"]
    assert bundled.source == "default" and bundled.family == "llama"
    assert 100e6 < bundled.parameters < 200e6 and bundled.context_length == 8192
    assert bundled.verdict == "runs CPU-only"
    tiny = rows["tandem-tests/tiny"]
    assert tiny.origin == "hub-cache" and tiny.family == "llama" and tiny.verdict == "runs CPU-only"
    huge = rows["huge"]
    assert 1e9 < huge.parameters and huge.verdict == "does not fit"
    assert "available" in huge.verdict_detail
    texts = [library.table.item(r, 6).text() for r in range(library.table.rowCount())]
    assert texts == [e.verdict for e in library.entries]
    library.select(huge.source)
    assert not library.buttons["load"].isEnabled()  # it would not fit
    assert library.buttons["remove"].isEnabled()  # added by the user
    library.select("default")
    assert not library.buttons["delete"].isEnabled()  # the bundled model stays
    library.resize(1000, 420)
    library.show()
    library.grab().save(str(tmp_path / "library.png"))


def test_load_from_the_library(qtbot, window, tmp_path, tiny_model_dir):
    library = _library(qtbot, window, tmp_path, tiny_model_dir)
    library.load_requested.connect(window.load_model)
    (tiny,) = [e for e in library.entries if e.origin == "hub-cache"]
    library.select(tiny.source)
    with qtbot.waitSignal(window.engine_ready, timeout=60_000):
        library.buttons["load"].click()
    assert window.engine.model_info.source == tiny.source
    assert window.store.setting("model.last") == tiny.source


@pytest.mark.parametrize("answer", [QMessageBox.Cancel, QMessageBox.Yes])
def test_delete_asks_first(qtbot, window, tmp_path, tiny_model_dir, monkeypatch, answer):
    library = _library(qtbot, window, tmp_path, tiny_model_dir)
    asked = []
    monkeypatch.setattr(QMessageBox, "question",
                        lambda parent, title, text, *a: asked.append(text) or answer)
    (tiny,) = [e for e in library.entries if e.origin == "hub-cache"]
    repo_dir = tmp_path / "hub" / "models--tandem-tests--tiny"
    library.select(tiny.source)
    library.buttons["delete"].click()
    assert len(asked) == 1 and str(repo_dir) in asked[0]
    assert repo_dir.exists() == (answer != QMessageBox.Yes)
    assert any(e.origin == "hub-cache" for e in library.entries) == (answer != QMessageBox.Yes)


def test_added_models_can_be_removed_from_the_list_only(qtbot, window, tmp_path,
                                                       tiny_model_dir):
    library = _library(qtbot, window, tmp_path, tiny_model_dir)
    library.add(str(tiny_model_dir))
    assert library.selected().source == str(tiny_model_dir)
    library.buttons["remove"].click()
    assert str(tiny_model_dir) not in window.store.setting(ADDED_KEY)
    assert tiny_model_dir.exists()  # removed from the list, not from the disk


def test_a_restart_remembers_the_model_and_the_mode(qtbot, tiny_model_dir, tmp_path):
    from app.gui import startup_model

    def two_lanes(source):
        return Engine(load_model(source), lanes=[
            LaneSpec("gpu", "cpu", "float32", acts_as="gpu"), LaneSpec("cpu", "cpu", "float32")])

    db = tmp_path / "restart.db"
    first = open_window(qtbot, tiny_model_dir, db, two_lanes)
    assert first.engine.mode == "hybrid"
    first.set_mode("gpu-only")
    first.close()
    from app.store import ChatStore

    store = ChatStore(db)
    assert startup_model(store, "default") == str(tiny_model_dir)
    assert startup_model(store, "/some/other") == "/some/other"  # asked for: that one
    again = open_window(qtbot, startup_model(store, "default"), store, two_lanes)
    assert again.engine.mode == "gpu-only"
    again.close()


def test_search_the_hub_and_download(qtbot, window, tmp_path, tiny_model_dir, monkeypatch):
    from huggingface_hub import constants

    from tests.fake_hub import FakeHub

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # `make test` sets it

    cache = tmp_path / "downloads"
    with FakeHub("tandem-tests/tiny-chat", tiny_model_dir) as hub:
        library = ModelLibrary(window.store, 16 * GIB, False, default_model_path(), window,
                               hub_cache=str(cache), hub_endpoint=hub.endpoint)
        qtbot.addWidget(library)
        library.download_requested.connect(lambda repo: window.download_model(
            repo, endpoint=hub.endpoint, cache_dir=str(cache)))
        library.show()
        loads = []
        library.load_requested.connect(loads.append)
        library.repo_id.setText("tiny")
        qtbot.keyClick(library.repo_id, Qt.Key_Return)  # Enter searches; it loads nothing
        qtbot.waitUntil(lambda: library.results.rowCount() == 1, timeout=10_000)
        assert library.isVisible() and not loads
        # No button is the dialog's default: Enter never presses Load (under a
        # real window manager it did; offscreen Qt does not activate windows).
        from PySide6.QtWidgets import QPushButton
        assert not any(b.autoDefault() or b.isDefault()
                       for b in library.findChildren(QPushButton))
        assert library.results.item(0, 0).text() == "tandem-tests/tiny-chat"
        assert library.results.item(0, 1).text() == "MLX" and "KiB" in library.results.item(0, 2).text()
        library.results.selectRow(0)
        with qtbot.waitSignal(window.engine_ready, timeout=60_000):
            library.buttons["download"].click()
        assert "tiny-chat" in window.engine.model_info.source
        # Nothing matches: said so; offline: said so, the dialog stays usable.
        library.repo_id.setText("no-such-model")
        library.buttons["search"].click()
        qtbot.waitUntil(lambda: "No MLX or GGUF" in library.hub_status.text(), timeout=10_000)
    library.refresh()  # the download is now in the library, from the cache
    assert any(e.name == "tandem-tests/tiny-chat" for e in ModelLibrary(
        window.store, 16 * GIB, False, None, window, hub_cache=str(cache)).entries)
    offline = ModelLibrary(window.store, 16 * GIB, False, None, window,
                           hub_endpoint="http://127.0.0.1:9")
    qtbot.addWidget(offline)
    offline.repo_id.setText("qwen")
    offline.buttons["search"].click()
    qtbot.waitUntil(lambda: offline.hub_status.text().startswith("Offline:"), timeout=20_000)
    assert "Errno" not in offline.hub_status.text()


def test_a_gguf_repo_downloads_one_file_the_common_k_quant():
    from app.models.download import pick_gguf

    files = ["README.md", "m-Q8_0.gguf", "m-Q4_K_M.gguf", "m-Q2_K.gguf", "mmproj-Q4_K_M.gguf"]
    assert pick_gguf(files) == "m-Q4_K_M.gguf"
    assert pick_gguf(["x-IQ3_XS.gguf"]) == "x-IQ3_XS.gguf"
    assert pick_gguf(["config.json"]) is None


def test_a_gguf_repo_downloads_its_gguf_and_loads(qtbot, window, tmp_path, tiny_model_dir,
                                                  monkeypatch):
    from huggingface_hub import constants

    from tests.fake_hub import FakeHub
    from tests.test_gguf import write_gguf

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    repo = tmp_path / "repo"
    repo.mkdir()
    write_gguf(tiny_model_dir, repo / "tiny-Q8_0.gguf")
    (repo / "README.md").write_text("a GGUF repo")
    with FakeHub("tandem-tests/tiny-GGUF", repo, tags=("gguf",)) as hub:
        with qtbot.waitSignal(window.engine_ready, timeout=60_000):
            window.download_model("tandem-tests/tiny-GGUF", endpoint=hub.endpoint,
                                  cache_dir=str(tmp_path / "cache"))
    assert window.engine.model_info.source.endswith("tiny-Q8_0.gguf")


def test_the_window_opens_its_library_with_the_current_model_selected(qtbot, window):
    import psutil

    library = window.model_library()
    qtbot.addWidget(library)
    # The tiny test model is not on the library's list, so nothing is selected;
    # once it is added, opening the library selects it.
    assert library.selected() is None
    library.add(window.engine.model_info.source)
    again = window.model_library()
    qtbot.addWidget(again)
    assert again.selected().source == window.engine.model_info.source
    plan = window.engine.memory_plan
    loaded = plan.shared_weight_bytes + sum(lp.weight_bytes for lp in plan.lanes)
    assert library.budget_bytes >= loaded
    assert library.budget_bytes <= psutil.virtual_memory().total + loaded
    assert library.has_gpu is False
    assert any(e.source == "default" for e in library.entries)


def test_delete_never_removes_a_folder_that_is_not_only_a_model(qtbot, window, tmp_path,
                                                                 tiny_model_dir, monkeypatch):
    asked, told = [], []
    monkeypatch.setattr(QMessageBox, "question", lambda *a: asked.append(a) or QMessageBox.Yes)
    monkeypatch.setattr(QMessageBox, "information", lambda p, t, text: told.append(text))
    project = tmp_path / "my-project"
    shutil.copytree(tiny_model_dir, project)
    (project / "thesis.docx").write_bytes(b"years of work")
    home_like = tmp_path / "home"
    (home_like / "Documents").mkdir(parents=True)
    (home_like / "Documents" / "notes.odt").write_bytes(b"notes")
    library = ModelLibrary(window.store, 16 * GIB, False, None, window)
    qtbot.addWidget(library)
    library.add(str(project))  # a model folder that also holds the user's files
    library.buttons["delete"].click()
    assert (project / "thesis.docx").exists() and (project / "config.json").exists()
    assert asked == [] and len(told) == 1 and "other files" in told[0]
    library.add(str(home_like))  # not a model at all: delete is not even offered
    assert not library.buttons["delete"].isEnabled()
    library._delete()
    assert (home_like / "Documents" / "notes.odt").exists() and asked == []


def test_the_verdict_for_the_loaded_model_is_the_plan_the_engine_made():
    """The library judges a model with the plan the engine makes at load: the
    same weight format on the CPU (this machine's float32 probe) and the same
    KV per token (a GGUF computes in float32: its norms are F32)."""
    from engine import Engine
    from engine.models.catalog import describe_gguf, judge
    from engine.models.loader import default_model_path

    # The plan is made at load, before the lanes warm up: none is waited for.
    engine = Engine.load("default", ready_s=None)
    try:
        plan = engine.memory_plan
    finally:
        engine.close()
    entry = describe_gguf(default_model_path(), "bundled", "SmolLM2")
    judge(entry, plan.budget_bytes, any(lp.device == "gpu" for lp in plan.lanes),
          cpu_matmul=plan.cpu_matmul)
    assert entry.verdict_detail == "; ".join(plan.describe())
