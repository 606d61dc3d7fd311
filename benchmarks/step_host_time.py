"""The host's time per lane step when requests finish while others decode
(issue 34, part 4): a finished request's KV goes to the prefix cache (and
the disk tier); waiting for those copies inside the step stalls the host
behind the step in flight, and the device then idles while the host builds
the next one. Measured, not simulated: A = the copies waited for (the old
path, `PrefixCache.wait_inserts = True`), B = scheduled (`mx.async_eval`,
the default), alternated, same run.

Run: .venv/bin/python benchmarks/step_host_time.py [--model tiny-24x64|default|PATH]
     [--lane cpu|gpu] [--streams 1 16 64] [--rounds 3] [--disk]

Workload per round: `streams` chats at once, answers of staggered lengths
(8..64 tokens) so requests finish one by one while the rest decode, each
replaced by a new chat until 3 x streams have run. Reported per arm: host ms
per step and device wait ms per step (LaneStats), tokens/s; medians over
rounds, and B / A.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: E402,I001  (first: it loads the system OpenBLAS before MLX)
from engine import Engine, LaneSpec, SamplingParams, load_model  # noqa: E402
from engine.runtime.prefix import PrefixCache  # noqa: E402


def _model(name: str) -> str:
    if name != "tiny-24x64":
        return name
    from tests.tiny_model import build_tiny_llama

    return str(build_tiny_llama(Path(tempfile.mkdtemp()) / "tiny", num_layers=24, hidden=64,
                                max_positions=4096))


def one_round(eng: Engine, lane: str, streams: int, salt: int) -> dict:
    stats = eng.lanes[lane].stats
    before = (stats.host_s, stats.wait_s, stats.steps)
    total, started, k = 0, time.perf_counter(), 0
    live = []

    def submit():
        nonlocal k
        n = 8 + (k * 7) % 57  # 8..64: they finish at different steps
        live.append(eng.submit(
            [{"role": "user", "content": f"Chat {salt}-{k}: tell me something new."}],
            SamplingParams(max_tokens=n, temperature=0.0)))
        k += 1

    for _ in range(streams):
        submit()
    while live:
        done = live.pop(0).result(timeout=600)
        total += done.output_tokens
        if k < 3 * streams:
            submit()
    elapsed = time.perf_counter() - started
    steps = max(stats.steps - before[2], 1)
    return {"host_ms": (stats.host_s - before[0]) / steps * 1e3,
            "wait_ms": (stats.wait_s - before[1]) / steps * 1e3,
            "tokens_per_s": total / elapsed}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-24x64")
    ap.add_argument("--lane", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--disk", action="store_true", help="with a disk tier saving too")
    args = ap.parse_args()
    loaded = load_model(_model(args.model))
    extra = {"kv_cache_dir": tempfile.mkdtemp(prefix="tandem-kv-")} if args.disk else {}
    eng = Engine(loaded, lanes=[LaneSpec(args.lane, args.lane,
                                         "float32" if args.lane == "cpu" else "auto")],
                 prefix_cache_bytes=256 << 20, **extra)
    eng.wait_ready(600, every_lane=True)
    report = {"machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores",
              "date": time.strftime("%Y-%m-%d"), "model": args.model, "lane": args.lane,
              "disk": args.disk, "cases": {}}
    try:
        one_round(eng, args.lane, 4, salt=-1)  # warm-up, discarded
        for streams in args.streams:
            arms = {"wait": [], "scheduled": []}
            for r in range(args.rounds):
                order = ("wait", "scheduled") if r % 2 == 0 else ("scheduled", "wait")
                for arm in order:
                    PrefixCache.wait_inserts = arm == "wait"
                    eng.prefix_cache.clear()
                    arms[arm].append(one_round(eng, args.lane, streams, salt=r * 2 + (arm == "wait")))
            med = {arm: {key: round(statistics.median(x[key] for x in runs), 3)
                         for key in runs[0]} for arm, runs in arms.items()}
            med["scheduled_over_wait"] = {
                key: round(med["scheduled"][key] / max(med["wait"][key], 1e-9), 3)
                for key in med["wait"]}
            report["cases"][str(streams)] = med
            print(json.dumps({streams: med}), file=sys.stderr, flush=True)
    finally:
        PrefixCache.wait_inserts = False
        eng.close()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
