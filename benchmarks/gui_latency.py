"""Event-loop latency of the main window while four tabs stream.

Run: QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/gui_latency.py [--seconds 15]
     [--tabs 4]

`--tabs N`: N tabs stream at once instead of four (16: the CPU lane decodes
16 streams, issue 51's case), their prompts taken in turn.

A 10 ms QTimer records how late each tick arrives (lateness = interval between
ticks - 10 ms) on the GUI thread while four chats stream answers from the
default model. Goal: p99 under 16 ms, max under 50 ms.

With `--open-chat N` it measures opening a long chat instead (issue 30): a
JSON file of N messages (~600 characters each: prose, a list, code) is
imported through the Chat menu's path (app/chat_files.import_file: parse,
write, load the branch, open the tab; a large file is parsed on a worker
thread, and the import ends when `importer(window).done` fires) on a window whose engine is the tests'
tiny model, while a 5 ms QTimer records lateness until the transcript has
rendered all it renders by itself. `--code PATH` runs another checkout's app
(for example `git archive <commit> app engine tests | tar -x -C PATH`), so
that the code before a change is measured by the same script:

  QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/gui_latency.py \
      --open-chat 100000 [--code PATH]
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


BODY = ("Here is what I found about **item {i}**. The first point is that a "
        "paragraph of ordinary prose takes most of the space, with `inline code` "
        "and a [link](https://example.com/{i}).\n\n- one point\n- another point, longer "
        "than the first one\n\n```python\ndef item_{i}(x):\n    return x * {i}  # why\n"
        "```\n\nAnd a closing sentence that wraps onto the next line of the view.")


def _quantiles(late: list[float]) -> dict:
    late = sorted(late) or [0.0]
    pick = lambda q: late[min(len(late) - 1, int(q * (len(late) - 1)))]  # noqa: E731
    # A stall of seconds is one tick: its length is `max`, not a percentile.
    return {"ticks": len(late), "p50": round(pick(0.5), 2), "p99": round(pick(0.99), 2),
            "max": round(late[-1], 1), "over_16ms": sum(x > 16 for x in late)}


def open_chat(count: int, code: str) -> int:
    """Lateness of the GUI thread while a `count`-message chat is imported and opened."""
    app = QApplication(sys.argv)
    import app.chat.chat_files as chat_files
    import app.window.main_window as main_window
    from app.window.main_window import MainWindow
    from app.store import ChatStore
    from tests.tiny_model import build_tiny_llama
    from tests.windows import cpu_engine

    folder = Path(tempfile.mkdtemp())
    path = folder / "long.json"
    path.write_text(json.dumps({"messages": [
        {"role": "user", "content": f"Question {i}?"} if i % 2 == 0 else
        {"role": "assistant", "content": BODY.format(i=i)} for i in range(count)]}))
    phases: dict[str, float] = {}

    def timed(name, function):
        def wrapper(*args, **kwargs):
            began = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                phases[name] = round(time.perf_counter() - began, 3)
        return wrapper
    for name in ("import_chat", "parse_chat", "write_chat"):  # whichever import_file calls
        if hasattr(chat_files, name):
            setattr(chat_files, name, timed(f"{name} (store/chat_json.py)",
                                            getattr(chat_files, name)))
    try:  # a large import written and read back on a worker (app/store/bulk_write.py)
        from app.store import bulk_write
        for name in ("write_chat", "read_branch"):
            setattr(bulk_write, name, timed(f"bulk_write.{name} (worker thread)",
                                            getattr(bulk_write, name)))
    except ImportError:  # code before it
        pass
    main_window.load_history = timed("load_history (store)", main_window.load_history)
    window = MainWindow(str(build_tiny_llama(folder / "tiny")), engine_factory=cpu_engine,
                        store=ChatStore(folder / "long.db"))
    window.open_chat = timed("open_chat (load_history, the tab, its first slice)",
                             window.open_chat)
    window.resize(1500, 900)
    window.show()
    ticks: list[float] = []
    late: dict[str, list[float]] = {"opening": [], "filling": []}
    phase: list[str] = []
    timer = QTimer()
    timer.setInterval(5)

    def tick():
        now = time.perf_counter()
        if ticks and phase:
            # The first tick after import_file returned waited for all of it.
            late["opening" if phase[0] == "opened" else phase[0]].append(
                max((now - ticks[-1]) * 1000 - 5, 0.0))
            phase[0] = "filling" if phase[0] == "opened" else phase[0]
        ticks.append(now)

    def go():
        phase.append("opening")
        began = time.perf_counter()
        chat_id = chat_files.import_file(window, path)
        phases["import_file (all of it, GUI thread)"] = round(time.perf_counter() - began, 3)
        if chat_id is None and hasattr(chat_files, "importer"):  # parsed on a worker
            chat_files.importer(window).done.connect(lambda _: opened(began))
        else:
            opened(began)

    def opened(began):
        phase[0] = "opened"
        phases["until the tab is open (from the import)"] = round(
            time.perf_counter() - began, 3)
        tab = window.current_tab()

        def filled():
            if getattr(tab.transcript, "slicing", False):  # (code before slicing: never)
                return
            waiter.stop()
            phases["until rendered (from the import)"] = round(time.perf_counter() - began, 3)
            phases["messages rendered"] = count - getattr(tab.transcript, "first_rendered", 0)
            QTimer.singleShot(300, app.quit)
        waiter = QTimer()
        waiter.timeout.connect(filled)
        waiter.start(1)
        opened.waiter = waiter

    def start():
        timer.timeout.connect(tick)
        timer.start()
        QTimer.singleShot(300, go)

    window.engine_ready.connect(start)
    app.exec()
    timer.stop()
    window.close()
    window.wait_for_engines()
    print(json.dumps({
        "machine": f"{platform.machine()} {len(__import__('os').sched_getaffinity(0))} cores, "
                   "offscreen Qt",
        "date": time.strftime("%Y-%m-%d"), "messages": count,
        "code": code,
        "phases_s": phases,
        # Every tick from the click to the end: the import's own stall included.
        "lateness_ms_all": _quantiles(late["opening"] + late["filling"]),
        # Ticks after the tick that waited for import_file: the transcript filling in.
        "lateness_ms_while_filling": _quantiles(late["filling"]),
    }, indent=2))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--tabs", type=int, default=4, help="tabs streaming at once")
    parser.add_argument("--open-chat", type=int, default=None, metavar="N",
                        help="measure opening an imported N-message chat instead")
    parser.add_argument("--code", default=str(Path(__file__).resolve().parents[1]),
                        help="with --open-chat: the checkout whose app to run")
    parser.add_argument("--switch-interval-ms", type=float, default=None,
                        help="override sys.setswitchinterval (the app sets its own)")
    parser.add_argument("--engine-nice", type=int, default=None,
                        help="niceness of the engine's threads (default: the app's)")
    args = parser.parse_args()
    if args.open_chat:
        sys.path.insert(0, args.code)
        return open_chat(args.open_chat, args.code)
    app = QApplication(sys.argv)
    from app.models.engine_loader import ENGINE_NICE
    from app.window.main_window import MainWindow
    from engine import Engine
    from app.store import ChatStore

    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1000)
    nice = ENGINE_NICE if args.engine_nice is None else args.engine_nice
    window = MainWindow("default", store=ChatStore(Path(tempfile.mkdtemp()) / "lat.db"),
                        engine_factory=lambda source: Engine.load(source, worker_nice=nice))
    counted: list[int] = []  # the lanes' output tokens at the start and the end
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
        tabs = [window.chat_tabs()[0]] + [window.new_chat() for _ in range(args.tabs - 1)]
        for k, tab in enumerate(tabs):
            prompt = PROMPTS[k % len(PROMPTS)] + (f" (version {k // len(PROMPTS) + 1})"
                                                  if k >= len(PROMPTS) else "")
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
        "engine_nice": nice, "tabs": args.tabs,
        "ticks_while_streaming": len(late),
        "output_tokens_per_s": (counted[1] - counted[0]) / args.seconds,
        "lateness_ms": {"p50": pick(0.5), "p99": pick(0.99), "max": late[-1]},
    }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
