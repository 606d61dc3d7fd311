"""SIMULATION benchmark: the M2 laptop alone vs the M2 laptop + an H100 vLLM
server over a 20 ms link, both routed by the production cost-aware router.

Run: .venv/bin/python benchmarks/remote_sim.py [--seeds 3]

Virtual time on cost profiles (engine/sim/profiles.json): the laptop's lanes
from the reference engine's published Apple M2 / Qwen2.5-0.5B figures, the
server from published vLLM figures on one H100 (cited in
benchmarks/RESULTS.md). The remote lane is the production RemoteScheduler
(capacity, breaker, learned cost) in front of a simulated server
(engine/sim/remote.py). What-if numbers for the routing, not measured speed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.core.policies import CostAwarePolicy  # noqa: E402
from engine.sim import Simulation, chat_workload, load_profile  # noqa: E402
from engine.sim.profiles import load_remote  # noqa: E402

LOADS = {"light": (2, 8.0), "moderate": (8, 6.0), "busy": (32, 3.0), "saturating": (96, 1.0)}


def run(profile: str, load: str, seed: int, remote: bool):
    n_tabs, think = LOADS[load]
    tabs = chat_workload(n_tabs, seed=seed, think_mean_s=think)
    specs, migration_s = load_profile(profile, 0.2 if profile != "m2-flat" else 0.0)
    remotes = [load_remote("h100-vllm")] if remote else []
    return Simulation(specs, CostAwarePolicy(), "hybrid", migration_s, remotes=remotes).run(tabs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    print("| laptop profile | load (tabs) | throughput, +remote vs laptop | mean completion "
          "ratio | TTFT p50 / p95 s laptop | TTFT p50 / p95 s +remote | share on remote |")
    print("|---|---|---|---|---|---|---|")
    for profile in ("m2-batched", "m2-flat"):
        for load in LOADS:
            gains, comps, rows = [], [], []
            for seed in range(args.seeds):
                alone = run(profile, load, seed, remote=False)
                both = run(profile, load, seed, remote=True)
                gains.append(both.throughput / alone.throughput - 1)
                comps.append(both.stat("completion")["mean"] / alone.stat("completion")["mean"])
                rows.append((alone, both))
            alone, both = rows[0]
            on_remote = sum(1 for r in both.requests if r.lanes and r.lanes[0][1] == "remote")
            a, b = alone.stat("ttft"), both.stat("ttft")
            print(f"| {profile} | {load} ({LOADS[load][0]}) | {statistics.fmean(gains):+.1%} "
                  f"| {statistics.fmean(comps):.2f}x | {a['p50']:.2f} / {a['p95']:.2f} "
                  f"| {b['p50']:.2f} / {b['p95']:.2f} | {on_remote}/{len(both.requests)} |")


if __name__ == "__main__":
    main()
