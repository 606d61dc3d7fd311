"""Does the SIMULATION speak for the engine? Sim-vs-real routing agreement.

Run: .venv/bin/python benchmarks/sim_agreement.py [--engines 3] [--traces 5]

Two real CPU lanes on a tiny random model (a float32 lane standing in for the
GPU, a float16 CPU lane), the cost-aware router with contention ablated (two
CPU lanes on a small machine contend so much that the router would keep one
idle). For each engine: a warm-up trace fits the lanes' cost models online,
they are frozen, then each trace runs on the real lanes and is replayed in the
simulator (the production scheduler with step times from the fitted models).
Agreement: the share of routing decisions ((phase, lane) per request, in
order) that are the same, and the share of requests whose decisions all are.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: E402,F401  (OpenBLAS before MLX)
from engine import Engine  # noqa: E402
from engine.core.policies import CostAwarePolicy  # noqa: E402
from engine.models.loader import load_model  # noqa: E402
from engine.sim import Simulation  # noqa: E402
from engine.sim.replay import agreement, fit, record, simulated_decisions  # noqa: E402
from tests.test_sim_agreement import chat_trace, two_unequal_lanes  # noqa: E402
from tests.tiny_model import build_tiny_llama  # noqa: E402

# The workload RESULTS.md's figures were measured on (tests use a denser one).
TRACE = {"n": 16, "gap_s": 0.015}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engines", type=int, default=3)
    parser.add_argument("--traces", type=int, default=5)
    args = parser.parse_args()
    model_dir = build_tiny_llama(Path(tempfile.mkdtemp()) / "tiny")
    loaded = load_model(str(model_dir))
    requests, decisions = [], []
    for _ in range(args.engines):
        eng = Engine(load_model(str(model_dir)), lanes=two_unequal_lanes(),
                     policy=CostAwarePolicy())
        for lane in eng.lanes.values():
            lane.cost.contention, lane.cost.learn_contention = 0.0, False
        lanes = fit(eng, chat_trace(loaded, **TRACE))
        for _ in range(args.traces):
            trace, real = record(eng, chat_trace(loaded, **TRACE))
            eng.prefix_cache.clear()
            sim = simulated_decisions(Simulation(lanes, CostAwarePolicy(), "hybrid").replay(trace))
            whole, each = agreement(real, sim)
            requests.append(whole)
            decisions.append(each)
            print(f"trace: {whole:.0%} of requests, {each:.0%} of decisions agree; "
                  f"real plans {sorted({tuple(d) for d in real})}")
        eng.close()
    print(f"\n{len(decisions)} traces of {len(chat_trace(loaded, **TRACE))} requests: decisions agree "
          f"{statistics.fmean(decisions):.1%} (median {statistics.median(decisions):.0%}, "
          f"min {min(decisions):.0%}); whole requests {statistics.fmean(requests):.1%}")


if __name__ == "__main__":
    main()
