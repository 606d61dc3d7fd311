"""Soak: the whole app on the default model for many rounds of random trouble.

Run: QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/soak.py [--rounds 8] [--tabs 6] [--turns 3]

Two CPU lanes (one acting as the GPU, so mode switches and hand-offs run),
the default model, `--tabs` chats for `--turns` turns per round with random
stops, closed tabs (mid-stream), mode switches and regenerates (tests/soak.py).
After each round: every request ended exactly once, every open chat shows what
is stored, the lanes hold no KV; prints memory (MLX active minus the prefix
cache) and the thread count per round.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: E402,F401  (OpenBLAS before MLX)
from PySide6.QtWidgets import QApplication  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--tabs", type=int, default=6)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    app = QApplication([])
    from app.window.main_window import MainWindow
    from app.store import ChatStore
    from engine import Engine, LaneSpec
    from tests.soak import Ledger, SoakStats, check_and_measure, soak_round, wait_until

    def factory(source):
        return Engine.load(source, lanes=[LaneSpec("gpu", "cpu", acts_as="gpu"),
                                          LaneSpec("cpu", "cpu")], mode="hybrid")

    window = MainWindow("default", engine_factory=factory,
                        store=ChatStore(Path(tempfile.mkdtemp()) / "soak.db"))
    window.show()
    wait_until(lambda: window.engine is not None, timeout=300)
    ledger, stats, rng = Ledger(window.engine), SoakStats(), random.Random(args.seed)
    print("| round | requests | stops | closed tabs | mode switches | regenerates | "
          "memory - prefix cache MiB | threads | problems | s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    failed = False
    for number in range(1, args.rounds + 1):
        started = time.monotonic()
        soak_round(window, rng, stats, tabs=args.tabs, turns=args.turns)
        problems = check_and_measure(window, ledger, stats)
        failed |= bool(problems)
        print(f"| {number} | {stats.requests} | {stats.stops} | {stats.closes} | "
              f"{stats.switches} | {stats.regenerates} | {stats.memory_mib[-1]:.1f} | "
              f"{stats.threads[-1]} | {len(problems)} | {time.monotonic() - started:.0f} |",
              flush=True)
        for problem in problems[:5]:
            print("  ", problem, flush=True)
    window.close()
    window.wait_for_engines()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
