"""Event-loop lateness while an answer streams into a long chat.

Run: QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/long_chat_latency.py \
         [--messages 500] [--seconds 15] [--rounds 2] [--before PATH]

One tab holds a chat of `--messages` stored messages (paragraphs, lists and
code, ~600 characters each) and streams a new answer into it while three other
tabs stream too, all from the default model. A 10 ms QTimer on the GUI thread
records how late each tick arrives (as in benchmarks/gui_latency.py). The
model's 8k context cannot hold 500 messages, so the engine is given the last
message only; the window holds and renders the whole chat. With
`--before PATH` (another checkout, for example a git worktree of the previous
commit) the same measurement runs on that code too, alternating, each run in
its own process, so that both are measured in one sitting.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BODY = ("Here is what I found about **item {i}**. The first point is that a "
        "paragraph of ordinary prose takes most of the space, with `inline code` "
        "and a [link](https://example.com/{i}).\n\n- one point\n- another point, longer "
        "than the first one\n\n```python\ndef item_{i}(x):\n    return x * {i}  # why\n"
        "```\n\nAnd a closing sentence that wraps onto the next line of the view.")

PROMPTS = ["Write a long story about a lighthouse keeper.",
           "Explain how a bicycle works, in detail.",
           "Describe the water cycle step by step.",
           "Write a poem about autumn leaves, with a title."]

CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import engine  # OpenBLAS before MLX
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
app = QApplication([])
from app.models.engine_loader import ENGINE_NICE
from app.window.main_window import MainWindow
from app.store import ChatStore
from engine import Engine

messages, seconds, body, prompts = json.loads(sys.argv[2])
store = ChatStore(Path(tempfile.mkdtemp()) / "long.db")
chat = store.create_chat("long chat")
for i in range(messages):
    store.add_message(chat.id, "user" if i % 2 == 0 else "assistant",
                      f"Question {i}?" if i % 2 == 0 else body.format(i=i))
store.save_open_tabs([chat.id], chat.id)
window = MainWindow("default", store=store,
                    engine_factory=lambda s: Engine.load(s, worker_nice=ENGINE_NICE))
window.resize(1500, 900)
window.show()
ticks, late = [], []
timer = QTimer()
timer.setInterval(10)

def tick():
    now = time.perf_counter()
    if ticks and any(t.is_streaming for t in window.chat_tabs()):
        late.append(max((now - ticks[-1]) * 1000 - 10, 0.0))
    ticks.append(now)

def start():
    # The default model's 8k context cannot hold 500 messages (a 128k model
    # can): the engine answers the last message only; the window renders all.
    render = window.engine.render
    window.engine.render = lambda messages: render(messages[-1:])
    long_tab = window.chat_tabs()[0]
    others = [window.new_chat() for _ in range(3)]
    for tab, prompt in zip(others, prompts[1:]):
        tab.composer.setPlainText(prompt)
        tab.send()
    window.tabs.setCurrentWidget(long_tab)  # the long chat is the one on screen
    long_tab.composer.setPlainText(prompts[0])
    long_tab.send()
    timer.timeout.connect(tick)
    timer.start()
    QTimer.singleShot(int(seconds * 1000), finish)

def finish():
    timer.stop()
    window.close()
    app.quit()

window.engine_ready.connect(start)
app.exec()
window.wait_for_engines()
late.sort()
pick = lambda q: late[min(len(late) - 1, int(q * (len(late) - 1)))]
print(json.dumps({"ticks": len(late), "p50": pick(0.5), "p99": pick(0.99), "max": late[-1]}),
      flush=True)
import os
os._exit(0)  # the measurement is out; skip interpreter teardown with MLX threads parked
"""


def run(root: Path, messages: int, seconds: float) -> dict:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", CHILD, str(root),
                           json.dumps([messages, seconds, BODY, PROMPTS])],
                          capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--before", type=Path, default=None,
                        help="another checkout to measure in the same sitting")
    args = parser.parse_args()
    print("| code | run | ticks | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|---|")
    for round_ in range(args.rounds):
        sides = [("before", args.before)] if args.before else []
        for name, root in sides + [("this checkout", ROOT)]:
            r = run(root, args.messages, args.seconds)
            print(f"| {name} | {round_ + 1} | {r['ticks']} | {r['p50']:.1f} | {r['p99']:.1f} "
                  f"| {r['max']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
