"""SIMULATION benchmark: GPU-only vs warm-prefix vs cost-aware on the M2 profiles.

Run: .venv/bin/python benchmarks/hybrid_sim.py [--seeds 3]

Virtual time on cost profiles built from the reference engine's published
Apple M2 / Qwen2.5-0.5B figures (engine/sim/profiles.json). These are what-if
numbers for the routing logic, not measured speed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.policies import CostAwarePolicy, WarmPrefixPolicy  # noqa: E402
from engine.router import LeastLoadedPolicy  # noqa: E402
from engine.sim import Simulation, chat_workload, load_profile  # noqa: E402
from engine.sim.profiles import CONTENTIONS, PROFILES  # noqa: E402

# Saturating: enough tabs that the GPU alone is the bottleneck (its queue grows).
LOADS = {
    "moderate": {"m2-flat": (4, 8.0), "m2-batched": (4, 8.0)},
    "saturating": {"m2-flat": (24, 3.0), "m2-batched": (96, 1.0)},
}
RUNS = [("gpu-only", LeastLoadedPolicy, "gpu-only"), ("warm-prefix", WarmPrefixPolicy, "hybrid"),
        ("cost-aware", CostAwarePolicy, "hybrid")]


def ideal_gain(profile: str, c: float, gpu_only) -> float:
    """Both lanes decoding at the GPU-only run's batch size and context, each
    step slowed by (1 + c), against the GPU alone at the same point."""
    specs, _ = load_profile(profile, c)
    cost = {s.name: s.cost for s in specs}
    batch = max(gpu_only.mean_decode_batch["gpu"], 1.0)
    ctx = gpu_only.mean_decode_context["gpu"]
    thr = {n: batch / cost[n].decode_step_s(batch, ctx) for n in cost}
    return (thr["gpu"] + thr["cpu"]) / (1 + c) / thr["gpu"] - 1


def run(profile: str, c: float, load: str, seed: int):
    n_tabs, think = LOADS[load][profile]
    tabs = chat_workload(n_tabs, seed=seed, think_mean_s=think)
    results = {}
    for name, policy, mode in RUNS:
        specs, migration_s = load_profile(profile, c)
        results[name] = Simulation(specs, policy(), mode, migration_s).run(tabs)
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    print("| profile | c | load | policy | throughput vs GPU-only | mean completion vs GPU-only "
          "| TTFT mean / p50 / p95 s | TPOT mean ms | completion mean / p50 / p95 s "
          "| migrations | ideal gain | captured |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for profile in PROFILES:
        for c in CONTENTIONS:
            for load in LOADS:
                per_policy = {name: [] for name, _, _ in RUNS}
                ideals = []
                for seed in range(args.seeds):
                    results = run(profile, c, load, seed)
                    base = results["gpu-only"]
                    ideals.append(ideal_gain(profile, c, base))
                    for name, r in results.items():
                        per_policy[name].append((
                            r.throughput / base.throughput - 1,
                            r.stat("completion")["mean"] / base.stat("completion")["mean"] - 1,
                            r))
                ideal = statistics.fmean(ideals)
                for name, rows in per_policy.items():
                    thr = statistics.fmean(x[0] for x in rows)
                    comp = statistics.fmean(x[1] for x in rows)
                    r = rows[0][2]
                    ttft, tpot, compl = r.stat("ttft"), r.stat("tpot"), r.stat("completion")
                    captured = f"{thr / ideal:.0%}" if name != "gpu-only" and ideal > 0 else ""
                    print(f"| {profile} | {c} | {load} | {name} | {thr:+.1%} | {comp:+.1%} "
                          f"| {ttft['mean']:.2f} / {ttft['p50']:.2f} / {ttft['p95']:.2f} "
                          f"| {tpot['mean'] * 1000:.0f} "
                          f"| {compl['mean']:.1f} / {compl['p50']:.1f} / {compl['p95']:.1f} "
                          f"| {r.migrations} | {ideal:+.1%} | {captured} |")


if __name__ == "__main__":
    main()
