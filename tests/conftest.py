import atexit
import os
import shutil
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Each test process (each pytest-xdist worker, and the tandem processes its
# tests start, which inherit this environment) has folders of its own, removed
# when it ends: never the user's real chat database, nor its cache folder (the
# second place for changes waiting to be saved, the disk tier's KV, lane costs,
# MCP logs), nor the user's Hugging Face cache (a model there would show in the
# model library); nor another worker's.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
_SCRATCH = tempfile.mkdtemp(prefix=f"tandem-test-{_WORKER}-")
atexit.register(shutil.rmtree, _SCRATCH, True)
os.environ["TANDEM_DB"] = os.path.join(_SCRATCH, "tandem.db")
os.environ["TANDEM_CACHE_DIR"] = os.path.join(_SCRATCH, "cache")
os.environ["HF_HOME"] = os.path.join(_SCRATCH, "huggingface")
for _name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):  # under HF_HOME, as by default
    os.environ.pop(_name, None)

import gc  # noqa: E402

import keyring  # noqa: E402
import pytest  # noqa: E402

import engine  # noqa: E402,F401  (loads OpenBLAS before mlx)
from tests.keyrings import MemoryKeyring  # noqa: E402
from tests.tiny_model import build_tiny_llama  # noqa: E402

# Keys (the Local server's, remote lanes', MCP servers') go to a keyring of this
# process, never the user's (Secret Service, Keychain) that every worker shares.
keyring.set_keyring(MemoryKeyring())


def pytest_report_header(config):
    """Which device MLX runs the suite on, and why not the GPU where not."""
    from engine.models.diagnostics import gpu_usable

    usable, why = gpu_usable()
    return [f"MLX {__import__('mlx.core').core.__version__}: "
            + ("a usable GPU (tests marked gpu run)" if usable else
               "no GPU" if why == "none" else f"{why}: the suite runs on the CPU")]


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` need a GPU that runs kernels: they skip, saying why,
    elsewhere (this machine, CI, a hosted Mac runner's virtual GPU)."""
    from engine.models.diagnostics import gpu_usable

    usable, why = gpu_usable()
    if usable:
        return
    skip = pytest.mark.skip(reason="needs a GPU MLX can run kernels on: "
                            + ("there is none here" if why == "none" else why))
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_collection_finish(session):
    """Every module the suite imports is loaded by now, and lives to the end:
    moved out of the collector's sight, so that the collection after each test
    (below) walks only what tests made (0.3 s a test otherwise: about 400 s of
    the suite's 900 s of test time)."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _qt_garbage_dies_on_the_gui_thread():
    """A closed window held in a reference cycle is freed by whichever thread
    next runs Python's garbage collector. On a worker thread (a model loader,
    a lane) its Qt destructor then waits for Qt's lock while the GUI thread,
    deleting widgets too, holds the GIL: a deadlock seen under load. So each
    test's garbage is collected here, on the main thread."""
    yield
    gc.collect()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_loaded(tiny_model_dir):
    from engine.models.loader import load_model

    return load_model(str(tiny_model_dir))


@pytest.fixture
def make_engine(tiny_model_dir):
    """Build engines on the tiny model; closes them after the test."""
    from engine import Engine, LaneSpec
    from engine.models.loader import load_model

    engines = []

    def factory(lanes=None, ready=True, **kwargs):
        """`ready`: wait until every lane's start-up has ended (warm-up and
        calibration), so that a test starts from calibrated lanes."""
        lanes = lanes or [LaneSpec("cpu", "cpu", weight_format="float32")]
        e = Engine(load_model(str(tiny_model_dir)), lanes=lanes, **kwargs)
        engines.append(e)
        if ready:
            assert e.wait_ready(120, every_lane=True)
        return e

    yield factory
    for e in engines:
        e.close()


@pytest.fixture(scope="session")
def default_engine():
    """The real bundled model, shared by the end-to-end tests."""
    from engine import Engine

    e = Engine.load("default")
    yield e
    e.close()


@pytest.fixture
def db(tmp_path):
    """A chat database path for a window test."""
    return tmp_path / "tandem.db"


@pytest.fixture
def window(qtbot, tiny_model_dir, db):
    """The main window on the tiny model (one CPU lane), its engine ready."""
    from tests.windows import open_window

    w = open_window(qtbot, tiny_model_dir, db)
    yield w
    w.close()


@pytest.fixture
def store(tmp_path):
    """A chat store on a fresh database file, closed after the test."""
    from app.store import ChatStore

    s = ChatStore(tmp_path / "tandem.db")
    yield s
    s.close()


@pytest.fixture
def slow_window(qtbot, tiny_model_dir, db):
    """A window whose engine streams at human speed (20 ms a step), so an
    answer is still streaming when the test acts."""
    from tests.windows import open_window, paced_cpu_engine

    w = open_window(qtbot, tiny_model_dir, db, paced_cpu_engine(0.02))
    yield w
    w.close()
