import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Never touch the user's real chat database from tests.
os.environ["TANDEM_DB"] = os.path.join(__import__("tempfile").mkdtemp(prefix="tandem-test-"),
                                       "tandem.db")

import pytest  # noqa: E402

import engine  # noqa: E402,F401  (loads OpenBLAS before mlx)
from tests.tiny_model import build_tiny_llama  # noqa: E402


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

    def factory(lanes=None, **kwargs):
        lanes = lanes or [LaneSpec("cpu", "cpu", weight_format="float32")]
        e = Engine(load_model(str(tiny_model_dir)), lanes=lanes, **kwargs)
        engines.append(e)
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
