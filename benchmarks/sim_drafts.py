"""SIMULATION benchmark: drafts off vs on, on the simulator's cost profiles.

Run: .venv/bin/python benchmarks/sim_drafts.py [--seeds 3]

The production DraftPlanner (engine/core/drafts.py) decides on a virtual
clock; the drafter's acceptance is a workload parameter (a copy task ~0.9
with prompt lookup, open chat ~0.1-0.3) and a verifying step's time comes
from the profile's DraftCost (engine/sim/profiles.json "drafts": the CPU
slope measured on the 2-core x86 VM, the GPU figures assumed or taken from
the H200 runs). A "draft model" row adds a draft model's forward per
proposed token (a model ~1/8 of the target: 1/8 of a one-stream step).
These are what-if numbers for the planner's logic, never measured speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.core.policies import CostAwarePolicy  # noqa: E402
from engine.core.router import LeastLoadedPolicy  # noqa: E402
from engine.sim import Simulation, chat_workload, load_profile  # noqa: E402
from engine.sim.profiles import load_draft_costs  # noqa: E402

ACCEPTANCE = (0.1, 0.5, 0.9)
RUNS = (("gpu-only", LeastLoadedPolicy, "gpu-only"), ("hybrid", CostAwarePolicy, "hybrid"))


def run(profile: str, mode: str, drafts, seed: int, tabs: int):
    specs, migration = load_profile(profile)
    name, policy, how = next(r for r in RUNS if r[0] == mode)
    workload = chat_workload(tabs, seed=seed, turns=(2, 4), answer_tokens=(80, 200))
    result = Simulation(specs, policy(), mode=how, migration_s=migration,
                        drafts=drafts).run(workload)
    return result.stat("tpot")["mean"], sorted((r.tab, r.arrival, r.output)
                                               for r in result.requests)


def with_draft_model(profile: str, costs: dict) -> dict:
    """Each lane's cost with a draft model 1/8 of its one-stream step per token."""
    specs, _ = load_profile(profile)
    step = {s.name: s.cost.step_s(1, 512, 0, False) for s in specs}
    return {lane: dataclasses.replace(c, draft_s=step[lane] / 8) for lane, c in costs.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--tabs", type=int, default=6)
    args = ap.parse_args()
    report = {"note": "SIMULATION (virtual time, engine/sim/profiles.json): not measured speed",
              "tpot_vs_off": {}}
    for profile in ("m2-batched", "h200"):
        costs = load_draft_costs(profile)
        for mode, *_ in RUNS:
            row = {}
            for drafter, lane_costs in (("lookup", costs),
                                        ("draft model", with_draft_model(profile, costs))):
                for a in ACCEPTANCE:
                    ratios, same = [], True
                    for seed in range(args.seeds):
                        off, answers_off = run(profile, mode, None, seed, args.tabs)
                        on, answers_on = run(profile, mode, (a, lane_costs), seed, args.tabs)
                        ratios.append(on / off)
                        same &= [x[2] for x in answers_on] == [x[2] for x in answers_off]
                    row[f"{drafter}, acceptance {a}"] = {
                        "tpot_on_vs_off": round(statistics.median(ratios), 3),
                        "same_answers": same}
            report["tpot_vs_off"][f"{profile}, {mode}"] = row
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
