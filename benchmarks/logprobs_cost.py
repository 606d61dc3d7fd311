"""What logprobs cost the batch: 16 concurrent greedy streams on one engine,
none / half / all asking for logprobs with 5 alternatives.

Run: .venv/bin/python benchmarks/logprobs_cost.py [--model default] [--rounds 3]

Modes alternate within each round on the same engine (the machine is shared
and noisy); the ratio is output tokens/s of a mode over "none" in that round.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine import Engine, SamplingParams  # noqa: E402

WORDS = "the river carries light past quiet towns while engineers measure".split()


def run(engine, streams: int, with_logprobs: int, tokens: int) -> float:
    handles = []
    for i in range(streams):
        text = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(12))
        params = SamplingParams(max_tokens=tokens, logprobs=5 if i < with_logprobs else None)
        handles.append(engine.submit([{"role": "user", "content": f"{i}: {text}"}], params))
    started = time.perf_counter()
    out = sum(h.result(600).output_tokens for h in handles)
    return out / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="default")
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    engine = Engine.load(args.model)
    try:
        run(engine, args.streams, 0, 16)  # warm
        modes = {"none": 0, "half": args.streams // 2, "all": args.streams}
        ratios = {m: [] for m in modes}
        print(f"# {platform.machine()} {platform.system()}, model {args.model}, "
              f"{args.streams} streams x {args.tokens} tokens, logprobs with 5 alternatives")
        for r in range(args.rounds):
            got = {m: run(engine, args.streams, n, args.tokens) for m, n in modes.items()}
            for m in modes:
                ratios[m].append(got[m] / got["none"])
            print(f"round {r}: " + ", ".join(f"{m} {v:.1f} tok/s" for m, v in got.items()))
        print("ratio vs none (median): " + ", ".join(
            f"{m} {statistics.median(v):.3f}x" for m, v in ratios.items()))
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
