"""What a burst of slow-to-build grammars costs the streams already running
(issue 30): one greedy stream decodes on the default model; meanwhile 16
requests arrive at once, each with its own 240 KB `anyOf` JSON schema (the
issue's hostile case: before, each was compiled on the lane thread at
admission and a normal stream stalled for up to 6.8 s).

Run: .venv/bin/python benchmarks/grammar_stall.py [--schemas 16] [--rounds 3]

Per round, the stream's gaps between tokens are measured twice on the same
engine: while nothing else happens (the baseline step) and while the 16
grammars are built. Reported: the median baseline gap, the worst gap during
the builds and the ratio of the two (1 = no delay; 2 = one normal step
late), and the builds' wall time. The burst goes through
`Engine.prepare_grammar`, the build `submit` waits for, so that the
requests' own prefills (ordinary admissions) do not blur the measure;
`--submit` sends whole requests instead (max_tokens 1), which the code
before issue 30 also runs (it built each grammar at submit and again on
the lane at admission).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine import Engine, EngineError, Grammar, SamplingParams  # noqa: E402


def schema(seed: int, branches: int = 900) -> str:
    return json.dumps({"anyOf": [{"type": "object", "properties": {
        f"k{seed}_{i}_{j}": {"type": "string", "pattern": f"^v{i}[a-z]{{{j % 5 + 1}}}$"}
        for j in range(3)}, "required": [f"k{seed}_{i}_0"], "additionalProperties": False}
        for i in range(branches)]})


def p99(values: list[float]) -> float:
    """The nearest-rank 99th percentile (the largest of fewer than 100 values)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def gaps_while(engine, action, tokens: int) -> tuple[list[float], float]:
    """The stream's token gaps (s) while `action()` runs (from its 10th token
    on), and the action's seconds."""
    handle = engine.submit([{"role": "user", "content": "Tell me a long story about rivers."}],
                           SamplingParams(max_tokens=tokens))
    stamps, spent = [], [0.0]
    started = threading.Event()
    done = threading.Event()

    def act():
        started.wait()
        t0 = time.perf_counter()
        action()
        spent[0] = time.perf_counter() - t0
        done.set()

    worker = threading.Thread(target=act)
    worker.start()
    for event in handle:
        if type(event).__name__ == "Token" and event.text:
            stamps.append(time.perf_counter())
            if len(stamps) == 10:
                started.set()
            if done.is_set() and len(stamps) > 10:
                handle.cancel()
    started.set()
    worker.join()
    window = stamps[9:]
    return [b - a for a, b in zip(window, window[1:])], spent[0]


def burst(engine, grammars: list[Grammar], submit: bool) -> None:
    def one(grammar):
        try:
            if submit:  # whole requests (what the code before issue 30 can be asked)
                engine.submit([{"role": "user", "content": "json"}], SamplingParams(
                    max_tokens=1, grammar=grammar)).result(600)
            else:
                engine.prepare_grammar(grammar)
        except EngineError as e:
            print(f"  refused: {e}")

    threads = [threading.Thread(target=one, args=(g,)) for g in grammars]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="default")
    parser.add_argument("--schemas", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--submit", action="store_true",
                        help="send whole requests (max_tokens 1), not only the builds")
    args = parser.parse_args()
    engine = Engine.load(args.model)
    try:
        print(f"# {platform.machine()} {platform.system()}, model {args.model}, lanes "
              f"{list(engine.lanes)}, {args.schemas} distinct 240 KB anyOf schemas at once")
        engine.submit([{"role": "user", "content": "warm"}],
                      SamplingParams(max_tokens=8)).result(120)
        ratios = []
        for r in range(args.rounds):
            quiet, _ = gaps_while(engine, lambda: time.sleep(3.0), 400)
            # Made before the clock starts: building 16 dicts of 240 KB in
            # this process would hold the GIL, a cost of the benchmark's own.
            grammars = [Grammar("json_schema", schema(s))
                        for s in range(r * 1000, r * 1000 + args.schemas)]
            busy, seconds = gaps_while(engine, lambda: burst(engine, grammars, args.submit),
                                       4000)
            step = statistics.median(quiet)
            ratio = max(busy) / step
            ratios.append(ratio)
            print(f"round {r}: baseline gap median {step * 1e3:.1f} ms (max "
                  f"{max(quiet) * 1e3:.1f}); during the builds median "
                  f"{statistics.median(busy) * 1e3:.1f} ms, p99 "
                  f"{p99(busy) * 1e3:.1f} ms, max "
                  f"{max(busy) * 1e3:.1f} ms = {ratio:.2f}x the baseline step; "
                  f"{args.schemas} builds took {seconds:.1f} s")
        print(f"worst gap / baseline step (median of rounds): {statistics.median(ratios):.2f}x")
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
