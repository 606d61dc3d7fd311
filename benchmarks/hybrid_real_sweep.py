"""Is hybrid ever worse than GPU-only on the real engine? (issue 50)

Run: .venv/bin/python benchmarks/hybrid_real_sweep.py [--factors 0.3,0.5,0.7]
     [--rounds 2] [--tabs 4] [--max-answer 32] [--pace slowdown|min-step]
     [--log decisions.jsonl] [--gpu-floor 0]

Two real lanes of the bundled model on this machine's cores: "gpu" (a CPU
lane the router sees as the GPU, LaneSpec.acts_as) and "cpu", slowed to a
factor F of it:
- `--pace slowdown` (default): LaneConfig.slowdown = 1/F, every step lasts
  1/F times its real time (prefill and decode alike; the lane computes, then
  sleeps the rest): a device F times as fast, whose contention on the other
  lane is its real compute.
- `--pace min-step`: LaneConfig.min_step_s = the "gpu" lane's one-stream
  step / F: decode steps last at least that (a batch costs the same as one
  stream), prefill chunks longer than that run at the lane's own speed.
- `--gpu-floor X` (X > 0): the "gpu" lane's steps last at least X times its
  one-stream step too: a device whose batch is nearly free up to the floor
  (a GPU's), and two lanes that compute a fraction of each step, so their
  contention and the run-to-run spread shrink (the router's decisions, not
  the cores' noise, set the result).
For each F the same multi-tab chat workload (engine/sim/workload.py, scaled
down) runs in gpu-only mode and in hybrid mode with the cost-aware router, a
fresh engine each, the order alternated between rounds. As in the app, the
lanes' contention comes from a cost store (runtime/coststore.py) that the runs
before wrote: for each F a first hybrid run, not counted, learns it. Printed:
output tokens per wall second and the mean time to finish a request, hybrid
over gpu-only, per F and round; `--log` keeps every routing decision of the
counted hybrid runs (phase, lane, reason, predicted seconds per lane), a JSON
line each with its F and round, to read where a losing round's time went.
Measured (wall clock, both lanes sharing the
cores: the contention is real and learned online), not simulated.
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

from benchmarks.chat_tabs import play  # noqa: E402
from engine import Engine, LaneConfig, LaneSpec, SamplingParams  # noqa: E402
from engine.core.events import Migrated, Routed  # noqa: E402
from engine.sim import chat_workload  # noqa: E402


def one_stream_step_s() -> float:
    """The "gpu" lane's decode step, one stream, measured (a lone lane)."""
    engine = Engine.load("default", lanes=[LaneSpec("gpu", "cpu", "float32", acts_as="gpu")])
    try:
        messages = [{"role": "user", "content": "Tell me a long story about the sea."}]
        params = SamplingParams(max_tokens=64, temperature=0.0)
        engine.generate(messages, params)  # warm
        done = engine.submit(messages, params).result()
        return done.time_per_output_token_s
    finally:
        engine.close()


def run(mode: str, slow: LaneConfig, tabs, max_answer: int, store: str,
        log=None, label: dict | None = None, fast: LaneConfig | None = None) -> dict:
    engine = Engine.load("default", mode=mode, cost_store=store, lanes=[
        LaneSpec("gpu", "cpu", "float32", acts_as="gpu", config=fast),
        LaneSpec("cpu", "cpu", "float32", config=slow)])
    unsubscribe = None
    try:
        engine.wait_ready(120, every_lane=True)
        if log is not None:
            unsubscribe = engine.subscribe(lambda e: _log(log, label or {}, e))
        finished, wall = play(engine, tabs, max_answer)
    finally:
        if unsubscribe is not None:
            unsubscribe()
        engine.close()
    tokens = sum(f.output_tokens for f in finished)
    on_cpu = sum(f.output_tokens for f in finished if f.lanes and f.lanes[-1][1] == "cpu")
    touched = sum(any(lane == "cpu" for _, lane in f.lanes) for f in finished)
    return {"tokens_per_s": tokens / wall, "mean_e2e_s": statistics.fmean(f.e2e_s for f in finished),
            "cpu_share": on_cpu / max(tokens, 1), "on_cpu_any_phase": touched,
            "requests": len(finished), "wall_s": wall}


def _log(out, label: dict, event) -> None:
    """One routing decision (Routed, Migrated) as a JSON line."""
    if isinstance(event, (Routed, Migrated)):
        out.write(json.dumps({**label, "event": type(event).__name__,
                              "request": event.request_id,
                              "phase": getattr(event, "phase", "migrate"),
                              "lane": getattr(event, "lane", getattr(event, "to_lane", "")),
                              "reason": event.reason, "predicted_s": event.predicted_s,
                              "time": event.time}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--factors", default="0.3,0.5,0.7")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tabs", type=int, default=4)
    parser.add_argument("--max-answer", type=int, default=32)
    parser.add_argument("--pace", choices=("slowdown", "min-step"), default="slowdown")
    parser.add_argument("--log", help="a file for the counted hybrid runs' decisions")
    parser.add_argument("--gpu-floor", type=float, default=0.0,
                        help="the gpu lane's steps last at least this times its own step")
    args = parser.parse_args()
    log = open(args.log, "w", encoding="utf-8") if args.log else None
    step = one_stream_step_s()
    fast = LaneConfig(min_step_s=step * args.gpu_floor) if args.gpu_floor > 0 else None
    if fast is not None:
        step *= args.gpu_floor  # the "gpu" lane's one-stream step, as paced

    def slow(factor: float) -> LaneConfig:
        return (LaneConfig(slowdown=1 / factor) if args.pace == "slowdown"
                else LaneConfig(min_step_s=step / factor))

    tabs = chat_workload(args.tabs, seed=0, think_mean_s=0.5, arrival_window_s=1.0,
                         turns=(2, 3), paste_tokens=300)
    factors = [float(f) for f in args.factors.split(",")]
    folder = tempfile.mkdtemp(prefix="tandem-costs-")
    stores = {f: os.path.join(folder, f"costs-{f}.json") for f in factors}
    for factor in factors:  # contention learned as a first session would
        run("hybrid", slow(factor), tabs, args.max_answer, stores[factor], fast=fast)
    rows = []
    for round_ in range(args.rounds):
        for factor in factors:
            order = ("gpu-only", "hybrid") if round_ % 2 == 0 else ("hybrid", "gpu-only")
            got = {mode: run(mode, slow(factor), tabs, args.max_answer, stores[factor],
                             log if mode == "hybrid" else None,
                             {"factor": factor, "round": round_}, fast)
                   for mode in order}
            row = {"round": round_, "factor": factor, "order": order,
                   "throughput_ratio": got["hybrid"]["tokens_per_s"]
                   / got["gpu-only"]["tokens_per_s"],
                   "mean_e2e_ratio": got["hybrid"]["mean_e2e_s"] / got["gpu-only"]["mean_e2e_s"],
                   **{f"{mode}": v for mode, v in got.items()}}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if log is not None:
        log.close()
    learned = {}
    for factor, path in stores.items():
        try:
            learned[factor] = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            learned[factor] = None  # nothing contended for long enough to keep
    print(json.dumps({"machine": f"{platform.machine()} {platform.node()}", "pace": args.pace,
                      "gpu_floor": args.gpu_floor,
                      "learned_contention": learned,
                      "date": time.strftime("%Y-%m-%d %H:%M"), "gpu_lane_step_s": step,
                      "per_factor": {f: {"throughput_ratio": statistics.fmean(
                          r["throughput_ratio"] for r in rows if r["factor"] == f),
                          "mean_e2e_ratio": statistics.fmean(
                          r["mean_e2e_ratio"] for r in rows if r["factor"] == f)}
                          for f in sorted({r["factor"] for r in rows})}}, indent=2))


if __name__ == "__main__":
    main()
