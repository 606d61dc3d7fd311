"""Event-loop latency of the main window while four tabs stream.

Run: QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/gui_latency.py [--seconds 15]

A 10 ms QTimer records how late each tick arrives (lateness = interval between
ticks - 10 ms) on the GUI thread while four chats stream answers from the
default model. Goal: p99 under 16 ms, max under 50 ms.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from PySide6.QtCore import QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

PROMPTS = ["Write a long story about a lighthouse keeper.",
           "Explain how a bicycle works, in detail.",
           "Describe the water cycle step by step.",
           "Write a poem about autumn leaves, with a title."]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--switch-interval-ms", type=float, default=None,
                        help="override sys.setswitchinterval (the app sets its own)")
    parser.add_argument("--engine-nice", type=int, default=None,
                        help="niceness of the engine's threads (default: the app's)")
    args = parser.parse_args()
    app = QApplication(sys.argv)
    from app.engine_loader import ENGINE_NICE
    from app.main_window import MainWindow
    from engine import Engine
    from app.store import ChatStore

    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1000)
    nice = ENGINE_NICE if args.engine_nice is None else args.engine_nice
    window = MainWindow("default", store=ChatStore(Path(tempfile.mkdtemp()) / "lat.db"),
                        engine_factory=lambda source: Engine.load(source, worker_nice=nice))
    counted: list[int] = []
    window.resize(1500, 900)
    window.show()
    ticks: list[float] = []
    streaming_ticks: list[float] = []
    timer = QTimer()
    timer.setInterval(10)

    def tick():
        now = time.perf_counter()
        if ticks:
            late = (now - ticks[-1]) * 1000 - 10
            if any(t.is_streaming for t in window.chat_tabs()):
                streaming_ticks.append(max(late, 0.0))
        ticks.append(now)

    def output_tokens() -> int:
        return sum(lane.stats.output_tokens for lane in window.engine.lanes.values())

    def start():
        counted.append(output_tokens())
        tabs = [window.chat_tabs()[0]] + [window.new_chat() for _ in range(3)]
        for tab, prompt in zip(tabs, PROMPTS):
            tab.composer.setPlainText(prompt)
            tab.send()
        timer.timeout.connect(tick)
        timer.start()
        QTimer.singleShot(int(args.seconds * 1000), finish)

    def finish():
        counted.append(output_tokens())
        timer.stop()
        window.close()
        app.quit()

    window.engine_ready.connect(start)
    app.exec()
    window.wait_for_engines()  # no MLX work may be left when the process ends
    late = sorted(streaming_ticks)
    pick = lambda q: late[min(len(late) - 1, int(q * (len(late) - 1)))]  # noqa: E731
    print(json.dumps({
        "machine": f"{platform.machine()} 2 cores, offscreen Qt",
        "date": time.strftime("%Y-%m-%d"),
        "engine_nice": nice,
        "ticks_while_streaming": len(late),
        "output_tokens_per_s": (counted[1] - counted[0]) / args.seconds,
        "lateness_ms": {"p50": pick(0.5), "p99": pick(0.99), "max": late[-1]},
    }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
