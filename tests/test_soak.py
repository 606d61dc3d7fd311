"""A small soak of the app on the real engine (two CPU lanes, one acting as the
GPU, so mode switches and hand-offs run): random stops, closed tabs, mode
switches and regenerates; nothing lost, duplicated or leaked (tests/soak.py;
the long version is benchmarks/soak.py)."""

import random

from engine import Engine, LaneSpec
from engine.models.loader import load_model
from tests.soak import Ledger, SoakStats, check_and_measure, soak_round
from tests.windows import open_window


def _two_lanes(source):
    return Engine(load_model(source), lanes=[
        LaneSpec("gpu", "cpu", "float32", acts_as="gpu"), LaneSpec("cpu", "cpu", "float32")],
        mode="hybrid")


def test_soak_nothing_lost_duplicated_or_leaked(qtbot, tiny_model_dir, tmp_path):
    window = open_window(qtbot, tiny_model_dir, tmp_path / "soak.db", _two_lanes)
    ledger = Ledger(window.engine)
    stats = SoakStats()
    rng = random.Random(7)
    try:
        for _ in range(3):
            soak_round(window, rng, stats, tabs=4, turns=3)
            assert check_and_measure(window, ledger, stats) == []
    finally:
        window.close()
    assert stats.requests >= 36 and stats.stops + stats.closes > 0 and stats.switches > 0
    # Steady after the first round: no growth in memory (beyond the prefix
    # cache, subtracted) or threads from round to round.
    assert stats.threads[-1] == stats.threads[0], stats.threads
    assert stats.memory_mib[-1] <= stats.memory_mib[0] + 8, stats.memory_mib
