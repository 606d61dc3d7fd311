"""What constrained rows cost a decode step: a batch of 16 rows on the
engine's own DecodeBatch (pipelined as in serving), stepped 100 times, with
0, 8 or 16 rows under a JSON schema (an array of 200 integers, so no row
finishes). Rows never leave, so every mode does the same work per step.

Run: .venv/bin/python benchmarks/constrained_step_cost.py [--model default] [--rounds 3]
     [--device gpu]   (the weights as loaded, on MLX's GPU: benchmarks/gpu/run.sh)

Modes alternate within each round (a shared, noisy machine); the ratio is a
mode's steps/s over all-free in that round.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: E402,F401  (the system OpenBLAS before MLX)
import mlx.core as mx  # noqa: E402

from engine.core.params import Grammar, SamplingParams  # noqa: E402
from engine.core.request import Request  # noqa: E402
from engine.models.loader import load_model  # noqa: E402
from engine.runtime.batch import DecodeBatch  # noqa: E402
from engine.runtime.calibration import _prefilled  # noqa: E402
from engine.runtime.constrain import Constraints, row_masks  # noqa: E402
from engine.runtime.sampling import TokenSampler, sample_rows  # noqa: E402

GRAMMAR = Grammar("json_schema", json.dumps({
    "type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99},
    "minItems": 200, "maxItems": 200}))


def steps_per_s(loaded, constraints, rows: int, constrained: int, steps: int) -> float:
    batch = DecodeBatch(loaded.model)
    joins = []
    for i in range(rows):
        ids = loaded.tokenizer.encode(f"row {i}: the river carries light past quiet towns")
        caches, logits = _prefilled(loaded.model, ids)
        params = SamplingParams(max_tokens=10_000)
        matcher = constraints.matcher(GRAMMAR) if i < constrained else None
        sampler = TokenSampler(params, matcher)
        masks = row_masks([matcher], logits.shape[-1]) if matcher is not None else None
        first = sample_rows(logits, [sampler], None, masks)
        mx.eval(first, [c.state for c in caches])
        joins.append((Request(list(ids), params), sampler, caches, first))
    batch.add_many(joins)
    for _ in range(10):  # warm
        batch.step().tolist()
    started = time.perf_counter()
    for _ in range(steps):
        batch.step().tolist()
    return steps / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="default")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    args = parser.parse_args()
    if args.device == "gpu":
        mx.set_default_device(mx.gpu)
        loaded = load_model(args.model)  # as a GPU lane runs it
    else:
        loaded = load_model(args.model, "float32")  # as the CPU lane runs it on x86
    constraints = Constraints(loaded.tokenizer._tokenizer, loaded.stop_token_ids,
                              loaded.model.args.vocab_size)
    modes = {"free": 0, "half": args.rows // 2, "all": args.rows}
    ratios = {m: [] for m in modes}
    print(f"# {platform.machine()} {platform.system()}, {args.device}, model {args.model}, batch of "
          f"{args.rows}, {args.steps} steps, greedy; constrained rows: an array of 200 ints")
    for r in range(args.rounds):
        got = {m: steps_per_s(loaded, constraints, args.rows, n, args.steps)
               for m, n in modes.items()}
        for m in modes:
            ratios[m].append(got[m] / got["free"])
        print(f"round {r}: " + ", ".join(f"{m} {v:.1f} steps/s" for m, v in got.items()))
    print("ratio vs free (median): " + ", ".join(
        f"{m} {statistics.median(v):.3f}x" for m, v in ratios.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
