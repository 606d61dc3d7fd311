"""Two real CPU lanes on this machine, the multi-tab chat workload, the default
model: router overhead per step and the cost model's prediction error.

Run: .venv/bin/python benchmarks/two_lanes_real.py [--tabs 6] [--max-answer 48]

One CPU lane stands in for the GPU (LaneSpec.acts_as="gpu"); both share the
machine's 2 cores, so this measures the scheduler, not a CPU/GPU speed-up.
Workload turn lengths come from engine.sim.workload (scaled down: answers
capped, think time / 10) so it finishes in a few minutes.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.chat_tabs import play  # noqa: E402
from engine import Engine, LaneSpec, Migrated, Routed, SamplingParams  # noqa: E402
from engine.sim import chat_workload  # noqa: E402


def overlap(engine) -> dict:
    """Do the two lanes really step at the same time? One 64-token decode alone,
    then one on each lane at once: 2.0 = fully overlapped, 1.0 = serialized."""
    from engine.core.router import LeastLoadedPolicy

    policy, engine.policy = engine.policy, LeastLoadedPolicy()
    params = SamplingParams(max_tokens=64)
    messages = [{"role": "user", "content": "Tell me a long story about the sea."}]
    engine.generate(messages, params)  # warm
    t = time.perf_counter()
    engine.generate(messages, params)
    alone = time.perf_counter() - t
    t = time.perf_counter()
    handles = [engine.submit(messages, params) for _ in range(2)]
    lanes = sorted(h.result().lanes[0][1] for h in handles)
    both = time.perf_counter() - t
    engine.policy = policy
    return {"one_request_s": alone, "two_requests_two_lanes_s": both, "lanes": lanes,
            "overlap": 2 * alone / both}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tabs", type=int, default=6)
    parser.add_argument("--max-answer", type=int, default=48)
    parser.add_argument("--policy", default="cost-aware")
    parser.add_argument("--overlap-only", action="store_true",
                        help="only the overlap check (run it with and without "
                             "OPENBLAS_NUM_THREADS=1 to see what the cores allow)")
    args = parser.parse_args()

    from engine.core.policies import make_policy

    engine = Engine.load("default", lanes=[LaneSpec("gpu", "cpu", "float32", acts_as="gpu"),
                                           LaneSpec("cpu", "cpu", "float32")],
                         policy=make_policy(args.policy), mode="hybrid")
    overlap_result = overlap(engine)
    if args.overlap_only:
        import os

        engine.close()
        print(json.dumps({"OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
                          **overlap_result}, indent=2))
        return
    engine.director.router_s, engine.director.router_calls = 0.0, 0
    steps_before = sum(lane.stats.steps for lane in engine.lanes.values())
    decisions = {"routed": 0, "migrated": 0}
    engine.subscribe(lambda e: decisions.__setitem__(
        "migrated" if isinstance(e, Migrated) else "routed",
        decisions["migrated" if isinstance(e, Migrated) else "routed"] + 1)
        if isinstance(e, (Routed, Migrated)) else None)
    tabs = chat_workload(args.tabs, seed=0, think_mean_s=0.5, arrival_window_s=2.0,
                         turns=(2, 3), paste_tokens=400)
    finished, wall = play(engine, tabs, args.max_answer)
    steps = sum(lane.stats.steps for lane in engine.lanes.values()) - steps_before
    result = {
        "machine": f"{platform.machine()} 2 cores (shared by both lanes)",
        "date": time.strftime("%Y-%m-%d"),
        "policy": args.policy,
        "requests": len(finished),
        "output_tokens": sum(f.output_tokens for f in finished),
        "cached_prompt_fraction": sum(f.cached_tokens for f in finished)
        / sum(f.prompt_tokens for f in finished),
        "wall_s": wall,
        "steps": steps,
        "router_calls": engine.router_calls,
        "router_ms_per_step": 1000 * engine.router_s / max(steps, 1),
        "router_ms_per_call": 1000 * engine.router_s / max(engine.router_calls, 1),
        "decisions": decisions,
        "overlap": overlap_result,
        "lanes": {name: {"steps": lane.stats.steps,
                         "cost_model_mean_abs_error": lane.cost.mean_abs_error,
                         "observed_steps": lane.cost.samples,
                         "calibrated_prefill_tps": lane.cost.prefill_tps,
                         "calibrated_decode_tps": lane.cost.decode_points[0][1]}
                  for name, lane in engine.lanes.items()},
    }
    engine.close()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
