"""Hybrid is never worse than GPU-only (issue 50), held on a reduced grid of
the SIMULATION sweep (engine/sim/sweep.py; the whole grid is
benchmarks/hybrid_sweep.py, its table in benchmarks/RESULTS.md).

The simulator runs the production scheduler, director and cost-aware router
in virtual time: only step times come from the cost profiles, so these are
what-if checks of the routing logic, deterministic for a seed, never
measured speed. Each cell is judged on the mean of its seeds (one seed's
makespan moves with where its last turns happen to run)."""

from __future__ import annotations

import statistics

import pytest

from engine.sim.sweep import Cell, run_cell

# Where the router lost before (issue 50: m2-batched with contention, the CPU
# lane at 30-70% of the seed's speed), the extremes of speed and contention,
# a moderate load, and the H200's GPU beside a CPU lane 200x slower.
# (profile, contention, CPU speed factor, load, seeds): the saturating
# batched cells are the slow ones (96 tabs) and vary little between seeds.
CELLS = [
    ("m2-batched", 0.2, 0.4, "saturating", (0,)),  # the worst: -12.8%
    ("m2-batched", 0.2, 2.0, "saturating", (0,)),  # a CPU fast enough to pay
    ("m2-batched", 0.0, 0.4, "moderate", (0, 1, 2)),
    ("m2-flat", 0.2, 1.0, "moderate", (0, 1, 2)),
    ("m2-flat", 0.4, 0.5, "saturating", (0, 1, 2)),
    ("m2-flat", 0.0, 0.05, "saturating", (0, 1, 2)),
    ("m2-flat", 0.0, 0.3, "saturating", (0, 1, 2)),
    ("h200", 0.2, 2.0, "saturating", (0,)),
]


def _cell(profile, contention, speed, load, seeds=(0, 1, 2)):
    results = [run_cell(Cell(profile, contention, speed, load, seed)) for seed in seeds]
    return (statistics.fmean(r.throughput for r in results),
            statistics.fmean(r.completion for r in results), results)


@pytest.mark.parametrize("profile,contention,speed,load,seeds", CELLS,
                         ids=[f"{p}-c{c}-x{f}-{load}" for p, c, f, load, _ in CELLS])
def test_hybrid_is_never_worse_than_gpu_only(profile, contention, speed, load, seeds):
    throughput, completion, results = _cell(profile, contention, speed, load, seeds)
    assert throughput >= -0.01, [round(r.throughput, 4) for r in results]
    assert completion <= 0.01, [round(r.completion, 4) for r in results]


def test_the_seeds_own_figures_keep_their_gain():
    """m2-flat at the seed's CPU speed without contention: hybrid's gain
    stays (+35% before and after issue 50's fix), and the CPU does real work."""
    throughput, completion, results = _cell("m2-flat", 0.0, 1.0, "saturating")
    assert throughput >= 0.20 and completion < 0
    assert all(r.cpu_share > 0.2 for r in results)


def test_a_cpu_lane_that_cannot_pay_is_left_idle_and_said_so():
    """m2-batched with contention 0.2 and the CPU at 40% of the seed's speed
    (where hybrid lost 12.8%): the router leaves the CPU idle and its
    decisions say why; the same CPU without contention is used."""
    from engine.core.policies import CostAwarePolicy
    from engine.sim.profiles import load_profile
    from engine.sim.simulator import Simulation
    from engine.sim.sweep import LOADS
    from engine.sim.workload import chat_workload

    tabs = chat_workload(*LOADS["saturating"]["m2-batched"][:1], seed=0,
                         think_mean_s=LOADS["saturating"]["m2-batched"][1])
    specs, migration_s = load_profile("m2-batched", 0.2, 0.4)
    result = Simulation(specs, CostAwarePolicy(), "hybrid", migration_s).run(tabs)
    assert not any(lane == "cpu" for _, _, _, lane, _ in result.decisions)
    assert any("CPU left idle: it would slow GPU more than it adds (contention 0.2)" in why
               for *_, why in result.decisions)
    specs, migration_s = load_profile("m2-batched", 0.0, 0.4)
    result = Simulation(specs, CostAwarePolicy(), "hybrid", migration_s).run(tabs)
    assert any(lane == "cpu" for _, _, _, lane, _ in result.decisions)
