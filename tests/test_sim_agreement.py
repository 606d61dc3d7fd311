"""The simulator speaks for the engine: one trace through two real CPU lanes
and through the SIMULATION (the production scheduler with step times from a
cost model) gives the same routing decisions.

The real lanes run in virtual time (engine/sim/lockstep.py): each step lasts
what the lane's true cost model says, so the decisions depend on the trace
alone, not on how busy the machine is. benchmarks/sim_agreement.py measures
the agreement with real, wall-clock step times (benchmarks/RESULTS.md)."""

from engine import LaneConfig, LaneSpec
from engine.core.costmodel import CostModel
from engine.core.policies import CostAwarePolicy
from engine.sim import Simulation
from engine.sim.lockstep import Lockstep, believe
from engine.sim.profiles import SimLaneSpec
from engine.sim.replay import PlannedRequest, simulated_decisions
from tests.helpers import prompt_of

TEXTS = ["hello world, how are you today?", "numbers 0123456789 and emoji",
         "the quick brown fox jumps over the lazy dog, and then the fox", "hello",
         "Tandem batches chats on the CPU and the GPU. Prefill and decode. " * 3,
         "café, naïve, 東京"]

# A GPU-like lane (fast prefill, batching nearly free) and a CPU-like lane.
# In virtual time neither slows the other: their contention is 0 and known
# (as if stored by an earlier run), so the router trusts its predictions.
KNOWN = dict(contention_stored=True, prefill_contention_stored=True)
TRUTH = {"gpu": CostModel(prefill_tps=4000.0, decode_points=[(0, 60.0), (2048, 45.0)],
                          batch_alpha=0.08, **KNOWN),
         "cpu": CostModel(prefill_tps=500.0, decode_points=[(0, 40.0), (2048, 30.0)],
                          batch_alpha=0.6, **KNOWN)}


def chat_trace(loaded, n: int = 24, gap_s: float = 0.04) -> list[PlannedRequest]:
    """Requests arriving faster than they finish, so that routing depends on
    the lanes' queues and batches, not only on which lane is faster."""
    return [PlannedRequest(gap_s * i, tuple(prompt_of(loaded, TEXTS[i % len(TEXTS)]
                                                      + " " * (i // len(TEXTS)))),
                           30 + 11 * (i % 5)) for i in range(n)]


def test_sim_and_real_lanes_make_the_same_decisions(make_engine, tiny_loaded):
    lockstep = Lockstep(TRUTH)
    paced = LaneConfig(gate=lockstep)
    engine = make_engine([LaneSpec("gpu", "cpu", "float32", paced, acts_as="gpu"),
                          LaneSpec("cpu", "cpu", "float32", paced)], policy=CostAwarePolicy())
    for name, lane in engine.lanes.items():
        believe(lane.cost, TRUTH[name])  # the router starts from the truth, as simulated
    trace, real = lockstep.replay(engine, chat_trace(tiny_loaded))
    lanes = [SimLaneSpec(name, "gpu" if name == "gpu" else "cpu", cost)
             for name, cost in TRUTH.items()]
    result = Simulation(lanes, CostAwarePolicy(), "hybrid").replay(trace)
    sim = simulated_decisions(result)
    assert [r.output for r in result.requests] == [t.answer_tokens for t in trace]
    # The decisions depend on the lanes' state: both lanes are used, and requests move.
    used = {lane for request in real for _, lane in request}
    assert used == {"gpu", "cpu"}, real
    assert any(phase == "migrate" for request in real for phase, _ in request), real
    assert sim == real
