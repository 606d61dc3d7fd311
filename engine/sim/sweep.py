"""SIMULATION: hybrid against GPU-only over a grid of machines and loads.

A cell is (profile, contention, CPU speed factor, load, seed): the same tabs
run twice through the production scheduler in virtual time, once in
`gpu-only` mode and once in `hybrid` with the cost-aware router. The CPU
lane's rates are the profile's scaled by the factor (engine/sim/profiles.py).
benchmarks/hybrid_sweep.py prints the whole grid; tests/test_hybrid_sweep.py
holds the router to a reduced one. What-if numbers, never measured speed.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.policies import CostAwarePolicy
from ..core.router import LeastLoadedPolicy
from .profiles import load_profile
from .simulator import Simulation
from .workload import chat_workload

# (tabs, mean think seconds) per profile: moderate leaves the GPU room,
# saturating keeps requests waiting on it (hybrid_sim.py's loads; h200 as
# m2-batched: 96 tabs keep its 64 batch slots full).
LOADS = {
    "moderate": {"m2-flat": (4, 8.0), "m2-batched": (4, 8.0), "h200": (8, 8.0)},
    "saturating": {"m2-flat": (24, 3.0), "m2-batched": (96, 1.0), "h200": (96, 1.0)},
}
SPEEDS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.5, 2.0)
CONTENTIONS = (0.0, 0.2, 0.4)
PROFILES = ("m2-flat", "m2-batched", "h200")


@dataclass(slots=True, frozen=True)
class Cell:
    profile: str
    contention: float
    cpu_speed: float
    load: str
    seed: int


@dataclass(slots=True, frozen=True)
class CellResult:
    cell: Cell
    throughput: float  # hybrid / GPU-only - 1
    completion: float  # hybrid mean completion / GPU-only's - 1
    cpu_share: float  # the hybrid run's output tokens decoded on the CPU lane, a fraction
    migrations: int
    gpu_throughput: float  # GPU-only's output tokens per virtual second


def _cpu_share(result) -> float:
    """Fraction of output tokens whose decode ended on a CPU lane (a request
    decodes on its last lane; moves are counted apart)."""
    total = sum(r.output for r in result.requests) or 1
    on_cpu = sum(r.output for r in result.requests
                 if r.lanes and r.lanes[-1][1] == "cpu")
    return on_cpu / total


def run_cell(cell: Cell, policy_factory=CostAwarePolicy) -> CellResult:
    tabs_n, think = LOADS[cell.load][cell.profile]
    tabs = chat_workload(tabs_n, seed=cell.seed, think_mean_s=think)
    runs = {}
    for mode, policy in (("gpu-only", LeastLoadedPolicy()), ("hybrid", policy_factory())):
        specs, migration_s = load_profile(cell.profile, cell.contention, cell.cpu_speed)
        runs[mode] = Simulation(specs, policy, mode, migration_s).run(tabs)
    base, hybrid = runs["gpu-only"], runs["hybrid"]
    return CellResult(
        cell, hybrid.throughput / base.throughput - 1,
        hybrid.stat("completion")["mean"] / base.stat("completion")["mean"] - 1,
        _cpu_share(hybrid), hybrid.migrations, base.throughput)


def grid(profiles=PROFILES, contentions=CONTENTIONS, speeds=SPEEDS,
         loads=tuple(LOADS), seeds=(0, 1, 2)) -> list[Cell]:
    return [Cell(p, c, f, load, s) for p in profiles for c in contentions for f in speeds
            for load in loads for s in seeds]
