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

from engine.core.policies import CostAwarePolicy, WarmPrefixPolicy  # noqa: E402
from engine.core.router import LeastLoadedPolicy  # noqa: E402
from engine.sim import Simulation, chat_workload, load_profile  # noqa: E402
from engine.sim.profiles import CONTENTIONS, PROFILES  # noqa: E402

# Saturating: enough tabs that the GPU alone is the bottleneck (its queue grows).
LOADS = {
    "moderate": {"m2-flat": (4, 8.0), "m2-batched": (4, 8.0)},
    "saturating": {"m2-flat": (24, 3.0), "m2-batched": (96, 1.0)},
}
RUNS = [("gpu-only", LeastLoadedPolicy, "gpu-only"), ("warm-prefix", WarmPrefixPolicy, "hybrid"),
        ("cost-aware", CostAwarePolicy, "hybrid")]


def _lane_thr(cost, batch: float, ctx: float) -> float:
    return batch / cost.decode_step_s(batch, ctx) if batch > 0 else 0.0


def ideal_gains(profile: str, c: float, gpu_only) -> tuple[float, float]:
    """(ideal, upper bound) throughput gain over the GPU alone, decode only.

    ideal: the GPU-only run's concurrent decodes (its mean decode batch, at its
    mean context) split between both lanes at the throughput-best split, each
    step slowed by (1 + c) while both run. This is the best any router can do
    with the decodes this workload keeps in flight.
    upper bound: each lane decoding a full GPU-only batch (twice the decodes
    the workload has in flight), the measure used before; on m2-flat the two
    agree, because a flat lane's throughput does not depend on its batch.
    """
    specs, _ = load_profile(profile, c)
    cost = {s.name: s.cost for s in specs}
    batch = max(gpu_only.mean_decode_batch["gpu"], 1.0)
    ctx = gpu_only.mean_decode_context["gpu"]
    alone = _lane_thr(cost["gpu"], batch, ctx)
    best = alone
    steps = 400
    for i in range(1, steps + 1):
        on_cpu = batch * i / steps
        both = (_lane_thr(cost["gpu"], batch - on_cpu, ctx)
                + _lane_thr(cost["cpu"], on_cpu, ctx)) / (1 + c)
        best = max(best, both)
    upper = (_lane_thr(cost["gpu"], batch, ctx) + _lane_thr(cost["cpu"], batch, ctx)) / (1 + c)
    return best / alone - 1, upper / alone - 1


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
          "| migrations | ideal gain | captured | upper bound |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for profile in PROFILES:
        for c in CONTENTIONS:
            for load in LOADS:
                per_policy = {name: [] for name, _, _ in RUNS}
                ideals, uppers = [], []
                for seed in range(args.seeds):
                    results = run(profile, c, load, seed)
                    base = results["gpu-only"]
                    ideal, upper = ideal_gains(profile, c, base)
                    ideals.append(ideal)
                    uppers.append(upper)
                    for name, r in results.items():
                        per_policy[name].append((
                            r.throughput / base.throughput - 1,
                            r.stat("completion")["mean"] / base.stat("completion")["mean"] - 1,
                            r))
                ideal, upper = statistics.fmean(ideals), statistics.fmean(uppers)
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
                          f"| {r.migrations} | {ideal:+.1%} | {captured} | {upper:+.1%} |")


if __name__ == "__main__":
    main()
