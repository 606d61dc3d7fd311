"""The app's CPU use while idle: the window with the default model loaded,
nothing streaming, the Scheduler dock shown.

Run: QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/idle_cpu.py [--seconds 10]

Alternates, in one process, the dock as it is (plots redrawn only when what
they show changes, and only while visible) with the previous behaviour (every
plot redrawn 20 times a second, the system plots twice a second whether shown
or not), and prints the process's CPU time per wall second for each.
Offscreen Qt paints into memory; a real display adds compositing on top.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TANDEM_CACHE_DIR", tempfile.mkdtemp())

import engine  # noqa: E402,F401,I001  (first: OpenBLAS before MLX)
from PySide6.QtCore import QEventLoop, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402


def spin(seconds: float) -> None:
    loop = QEventLoop()
    QTimer.singleShot(int(seconds * 1000), loop.quit)
    loop.exec()


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    app = QApplication([])  # noqa: F841
    from app.window.main_window import MainWindow
    from app.scheduler.lane_plots import LanePlots
    from app.store import ChatStore

    window = MainWindow(store=ChatStore(Path(tempfile.mkdtemp()) / "t.db"))
    window.resize(1400, 900)
    window.show()
    started = time.time()
    while window.engine is None and time.time() - started < 120:
        spin(0.2)
    spin(3.0)
    plots = window.scheduler.plots
    results = {"now": [], "always_redraw": []}
    for _ in range(args.rounds):
        for mode in results:
            always = mode == "always_redraw"
            plots.redraw = (lambda: (setattr(plots, "_dirty", True),
                                     LanePlots.redraw(plots))) if always else \
                (lambda: LanePlots.redraw(plots))
            window.scheduler._timer.timeout.disconnect()
            window.scheduler._timer.timeout.connect(plots.redraw)
            window.scheduler._timer.timeout.connect(window.scheduler._grow_timeline)
            c0, t0 = cpu_s(), time.time()
            spin(args.seconds)
            results[mode].append(100 * (cpu_s() - c0) / (time.time() - t0))
    window.close()
    now, before = min(results["now"]), min(results["always_redraw"])
    print(json.dumps({"idle_cpu_percent": results, "best_now": now, "best_before": before,
                      "ratio": now / before if before else None}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
