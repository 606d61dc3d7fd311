"""SIMULATION sweep: is hybrid ever worse than GPU-only? (issue 50)

Run: .venv/bin/python benchmarks/hybrid_sweep.py [--seeds 3] [--jobs N]
     [--profiles m2-flat,m2-batched,h200] [--speeds 0.3,0.5] [--worst]

Every cell (profile x contention x CPU speed factor x load) runs the same tabs
in gpu-only mode and in hybrid mode with the production cost-aware router, in
virtual time on cost profiles (engine/sim/profiles.json; the CPU lane's rates
scaled by the factor). It prints, per cell, throughput and mean completion vs
GPU-only (the mean over seeds, and the worst seed), the share of output tokens
the CPU lane decoded and the migrations. These are what-if numbers for the
routing logic, not measured speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.sim.sweep import CONTENTIONS, LOADS, PROFILES, SPEEDS, grid, run_cell  # noqa: E402


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(","))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--profiles", default=",".join(PROFILES))
    parser.add_argument("--contentions", type=_floats, default=CONTENTIONS)
    parser.add_argument("--speeds", type=_floats, default=SPEEDS)
    parser.add_argument("--loads", default=",".join(LOADS))
    args = parser.parse_args()
    cells = grid(tuple(args.profiles.split(",")), args.contentions, args.speeds,
                 tuple(args.loads.split(",")), tuple(range(args.seeds)))
    started = time.perf_counter()
    with Pool(args.jobs) as pool:
        results = pool.map(run_cell, cells, chunksize=1)
    by_cell = defaultdict(list)
    for r in results:
        c = r.cell
        by_cell[(c.profile, c.contention, c.cpu_speed, c.load)].append(r)
    print("SIMULATION (virtual time on cost profiles; not measured speed)")
    print("| profile | c | CPU speed | load | throughput vs GPU-only (mean / worst seed) "
          "| mean completion vs GPU-only (mean / worst seed) | CPU share of tokens "
          "| migrations |")
    print("|---|---|---|---|---|---|---|---|")
    worst_thr, worst_comp = 0.0, 0.0
    for key, rows in by_cell.items():
        thr = [r.throughput for r in rows]
        comp = [r.completion for r in rows]
        worst_thr, worst_comp = min(worst_thr, min(thr)), max(worst_comp, max(comp))
        print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} "
              f"| {statistics.fmean(thr):+.1%} / {min(thr):+.1%} "
              f"| {statistics.fmean(comp):+.1%} / {max(comp):+.1%} "
              f"| {statistics.fmean(r.cpu_share for r in rows):.0%} "
              f"| {statistics.fmean(r.migrations for r in rows):.0f} |")
    print(f"\n{len(cells)} runs of {len(by_cell)} cells in {time.perf_counter() - started:.0f} s; "
          f"worst seed anywhere: throughput {worst_thr:+.1%}, mean completion {worst_comp:+.1%}")


if __name__ == "__main__":
    main()
