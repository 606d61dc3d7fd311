"""What saving KV to disk costs the lanes (issue 33): 4 chats streaming at
once, turn after turn, on an engine with a disk tier and on one without,
alternating rounds; per round the p99 of the lane's step time (each step's
run as the runner measured it). Measured, not simulated.

Run: .venv/bin/python benchmarks/kv_save_cost.py [--rounds 5] [--turns 3]

Every finished turn queues its KV for the writer thread (several MB per
turn here), which competes with the lane for the machine's cores: that is
what the ratio shows.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: E402,I001  (first: it loads the system OpenBLAS before MLX)
import numpy as np  # noqa: E402
from engine import Engine, SamplingParams  # noqa: E402

TOPICS = ["lighthouses", "bread", "rivers", "meetings"]


def step_times(eng: Engine) -> list[float]:
    """Each committed step's run time on every lane, recorded from now on."""
    seen: list[float] = []
    lock = threading.Lock()
    for lane in eng.lanes.values():
        commit = lane.scheduler.commit

        def recording(plan, result, commit=commit):
            with lock:
                seen.append(result.seconds)
            return commit(plan, result)
        lane.scheduler.commit = recording
    return seen


def chat(eng: Engine, topic: str, turns: int, tag: str) -> None:
    # `tag` makes every round's chats new: each turn's KV is new to the disk.
    messages = [{"role": "user", "content": f"({tag}) Tell me about {topic}."}]
    for _ in range(turns):
        done = eng.generate(messages, SamplingParams(max_tokens=64), timeout=600)
        messages += [{"role": "assistant", "content": done.text},
                     {"role": "user", "content": "Tell me more."}]


def round_p99(eng: Engine, seen: list[float], turns: int, tag: str) -> float:
    seen.clear()
    threads = [threading.Thread(target=chat, args=(eng, t, turns, tag)) for t in TOPICS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return float(np.percentile(seen, 99))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="default")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--turns", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tandem-kv-") as folder:
        engines = {"off": Engine.load(args.model),
                   "on": Engine.load(args.model, kv_cache_dir=folder)}
        try:
            seen = {k: step_times(e) for k, e in engines.items()}
            p99 = {"on": [], "off": []}
            for r in range(args.rounds + 1):  # round 0 warms both and is not counted
                for k in (("on", "off") if r % 2 else ("off", "on")):
                    value = round_p99(engines[k], seen[k], args.turns, f"round {r}")
                    if r:
                        p99[k].append(value)
            disk = engines["on"].prefix_cache.disk
            disk.close(60)
            report = {
                "machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores",
                "date": time.strftime("%Y-%m-%d"),
                "p99_step_ms_on": [round(x * 1e3, 1) for x in p99["on"]],
                "p99_step_ms_off": [round(x * 1e3, 1) for x in p99["off"]],
                "median_p99_on_over_off": round(statistics.median(p99["on"])
                                                / statistics.median(p99["off"]), 3),
                "written_mb": round(disk.written_bytes / 1e6, 1), "dropped_saves": disk.dropped}
        finally:
            for e in engines.values():
                e.close()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
