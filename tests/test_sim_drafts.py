"""SIMULATION of drafts (engine/sim/drafts.py): the production DraftPlanner
decides on the virtual clock, with acceptance a workload parameter and a
verifying step's time from the lane's cost. Deterministic (virtual time,
draws keyed by request and position); these are checks of the planner's
logic, never measured speed."""

from __future__ import annotations

from engine.core.policies import CostAwarePolicy
from engine.sim import Simulation, chat_workload, load_profile
from engine.sim.drafts import DraftCost


def _run(acceptance, cost: DraftCost, mode="gpu-only", tabs=6, profile="m2-batched"):
    specs, migration = load_profile(profile)
    drafts = None if acceptance is None else (acceptance, {s.name: cost for s in specs})
    workload = chat_workload(tabs, seed=3, turns=(2, 3), answer_tokens=(60, 120))
    return Simulation(specs, CostAwarePolicy(), mode=mode, migration_s=migration,
                      drafts=drafts).run(workload)


def _answers(result):
    return sorted((r.tab, r.arrival, r.output) for r in result.requests)


def test_drafts_that_are_accepted_shorten_answers_and_write_the_same():
    cheap = DraftCost(slope=0.02, sync_s=0.001)  # a GPU at small batch
    plain, drafted = _run(None, cheap), _run(0.9, cheap)
    assert [a[2] for a in _answers(drafted)] == [a[2] for a in _answers(plain)]
    assert drafted.stat("tpot")["mean"] < 0.7 * plain.stat("tpot")["mean"]


def test_drafts_that_miss_are_given_up():
    """At 5% acceptance the planner drafts almost never, whatever the width
    costs: the time per token stays within 3% of no drafts."""
    for cost in (DraftCost(slope=0.02, sync_s=0.001), DraftCost(slope=0.1)):
        plain, drafted = _run(None, cost), _run(0.05, cost)
        assert drafted.stat("tpot")["mean"] <= 1.03 * plain.stat("tpot")["mean"]


def test_costly_positions_draft_less_than_cheap_ones():
    """The same acceptance pays less where each position costs more
    (compute-bound, a CPU): the planner verifies fewer positions there."""
    def positions(cost):
        specs, _ = load_profile("m2-batched")
        sim = Simulation(specs, CostAwarePolicy(), mode="gpu-only",
                         drafts=(0.7, {s.name: cost for s in specs}))
        sim.run(chat_workload(6, seed=3, turns=(2, 3), answer_tokens=(60, 120)))
        return sum(lane.scheduler.stats.drafted for lane in sim.lanes)

    assert positions(DraftCost(slope=0.3)) < positions(DraftCost(slope=0.01))
