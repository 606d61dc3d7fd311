"""Faster decode (issue 32), measured side by side in one run.

Run: .venv/bin/python benchmarks/speculative.py [--streams 16] [--tokens 96]
         [--rounds 3] [--model default]

Part 1, sampling (what is built so far):
- `kernel`: the sampling of one decode step for a batch of rows of the
  bundled model's vocabulary with the model's default settings (temperature
  0.7, top-p 0.95, top-k 40, min-p 0.05, repetition penalty 1.1): the
  row-by-row path Tandem had (kept here as the baseline, verbatim in its
  logic: mlx-lm's filters and penalty per row) against the batched one
  (engine/runtime/sampling.py), with greedy's argmax for scale.
- `engine`: N concurrent streams on the real engine, the model's default
  sampling against greedy, alternating rounds in the same process; the ratio
  of decode tokens/s is the figure (machines are shared and noisy).

Drafts: `--lanes` (lookup drafts on the engine's lanes, one stream and
`--streams` at once), `--draft-model` (the model drafting for itself, beside
mlx-lm's speculative_generate_step on the same weights), `--verify` (the
verification mechanism outside the lanes): benchmarks/speculative_drafts.py.
Every case compares answers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: E402,I001  (first: it loads the system OpenBLAS before MLX)
import mlx.core as mx  # noqa: E402
from mlx_lm.sample_utils import (apply_min_p, apply_top_k, apply_top_p,  # noqa: E402
                                 make_repetition_penalty)

from engine import Engine, SamplingParams  # noqa: E402
from engine.runtime.sampling import TokenSampler, sample_rows  # noqa: E402
from engine_throughput import QUESTIONS  # noqa: E402  (this folder: the same prompts)
from speculative_drafts import (draft_model_case, lanes_case,  # noqa: E402  (this folder)
                                lookup_replay, verify_case)

DEFAULTS = dict(temperature=0.7, top_p=0.95, top_k=40, min_p=0.05, repetition_penalty=1.1)


# ---- the row-by-row path Tandem had (the baseline) -----------------------------------
def old_rows(logits: mx.array, params: SamplingParams, contexts: list[mx.array],
             keys: list[mx.array]) -> mx.array:
    """engine/runtime/sampling.py before issue 32: each row through mlx-lm's
    penalty and filters (top-p sorting the vocabulary), its own key."""
    penalty = make_repetition_penalty(params.repetition_penalty, params.repetition_context_size)
    rows = []
    for i in range(logits.shape[0]):
        row = penalty(contexts[i], logits[i : i + 1])
        lp = row - mx.logsumexp(row, axis=-1, keepdims=True)
        lp = apply_top_p(lp, params.top_p)
        lp = apply_min_p(lp, params.min_p)
        lp = apply_top_k(lp, params.top_k)
        keys[i], sub = mx.random.split(keys[i])
        rows.append(mx.random.categorical(lp * (1.0 / params.temperature), key=sub))
    return mx.concatenate(rows, axis=0)


def _timed(fn, repeat: int) -> float:
    mx.eval(fn())  # warm (and JIT, on a GPU)
    start = time.perf_counter()
    for _ in range(repeat):
        mx.eval(fn())
    return (time.perf_counter() - start) / repeat


def kernel(rows: int, vocab: int, repeat: int) -> dict:
    logits = mx.random.normal((rows, vocab)) * 3.0
    history = [list(range(i, i + 300)) for i in range(rows)]
    fed = mx.arange(rows)
    params = SamplingParams(**DEFAULTS)
    contexts = [mx.array(h + [i], mx.uint32) for i, h in enumerate(history)]
    keys = [mx.random.key(i) for i in range(rows)]
    mx.eval(logits, fed, *contexts, *keys)
    samplers = [TokenSampler(params) for _ in range(rows)]
    old = _timed(lambda: old_rows(logits, params, contexts, keys), repeat)
    new = _timed(lambda: sample_rows(logits, samplers, lambda i, n: history[i][-n:], fed),
                 repeat)
    greedy = _timed(lambda: mx.argmax(logits, axis=-1), repeat)
    return {"rows": rows, "vocab": vocab, "old_ms": round(old * 1e3, 2),
            "new_ms": round(new * 1e3, 2), "greedy_ms": round(greedy * 1e3, 2),
            "new_vs_old": round(old / new, 2)}


def engine_case(model: str, streams: int, tokens: int, rounds: int) -> dict:
    eng = Engine.load(model)
    try:
        prompts = [[{"role": "user", "content": q}] for q in (QUESTIONS * 8)[:streams]]
        sampled = eng.default_params(max_tokens=tokens, seed=None)
        greedy = SamplingParams(max_tokens=tokens)
        results = {"greedy": [], "sampled": []}
        counts = {"greedy": [], "sampled": []}
        step_ms = {"greedy": [], "sampled": []}  # the lanes' host + device wait per step
        lanes = list(eng.lanes.values())
        order = (("greedy", greedy), ("sampled", sampled))
        for r in range(rounds + 1):  # round 0 warms both paths and is not counted
            for name, params in (order if r % 2 else order[::-1]):
                before = [(ln.stats.host_s + ln.stats.wait_s, ln.stats.steps) for ln in lanes]
                start = time.perf_counter()
                handles = [eng.submit(p, params, tab_id=f"bench-{n}")
                           for n, p in enumerate(prompts)]
                done = [h.result(900) for h in handles]
                wall = time.perf_counter() - start
                out = sum(d.output_tokens for d in done)
                if r == 0:
                    continue
                results[name].append(out / wall)
                counts[name].append(out)
                spent = sum(ln.stats.host_s + ln.stats.wait_s - b[0]
                            for ln, b in zip(lanes, before))
                steps = sum(ln.stats.steps - b[1] for ln, b in zip(lanes, before))
                step_ms[name].append(round(spent / max(steps, 1) * 1e3, 1))
        g, s = statistics.median(results["greedy"]), statistics.median(results["sampled"])
        return {"streams": streams, "max_tokens": tokens, "rounds": rounds,
                "sampling": {k: getattr(sampled, k) for k in DEFAULTS},
                "greedy_tok_s": [round(x, 1) for x in results["greedy"]],
                "sampled_tok_s": [round(x, 1) for x in results["sampled"]],
                "step_ms": step_ms, "greedy_tokens": counts["greedy"], "sampled_tokens": counts["sampled"],
                "sampled_vs_greedy": round(s / g, 3),
                "paired_ratios": [round(b / a, 3) for a, b in zip(results["greedy"],
                                                                  results["sampled"])]}
    finally:
        eng.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="default")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--skip-engine", action="store_true")
    ap.add_argument("--lanes", action="store_true",
                    help="the engine's lanes with drafts off and lookup, side by side")
    ap.add_argument("--only-streams", action="store_true",
                    help="with --lanes: only the concurrent streams cases")
    ap.add_argument("--verify", action="store_true",
                    help="a lone greedy request: plain steps against verified lookup drafts")
    ap.add_argument("--draft-model", action="store_true",
                    help="the model drafting for itself, engine and mlx-lm, single stream")
    ap.add_argument("--replay", action="store_true",
                    help="also replay lookup drafts over greedy answers (steps, not speed)")
    ap.add_argument("--answer-tokens", type=int, default=128,
                    help="tokens per answer in the drafts cases")
    ap.add_argument("--out", default=None,
                    help="also write the report here after each part (a run cut short keeps "
                         "what it measured)")
    args = ap.parse_args()
    report = {"machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores",
              "date": time.strftime("%Y-%m-%d"), "mlx": mx.__version__,
              "kernel": [kernel(rows, args.vocab, 10) for rows in (1, args.streams)]}

    def keep() -> None:
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=2, default=str))

    keep()
    if not args.skip_engine:
        report["engine"] = engine_case(args.model, args.streams, args.tokens, args.rounds)
        keep()
    if args.draft_model:
        report["draft_model_self"] = draft_model_case(args.model, args.rounds,
                                                      answer=args.answer_tokens)
        keep()
    if args.lanes:
        report["lanes_drafts"] = lanes_case(args.model, args.rounds, args.streams,
                                             args.only_streams, args.answer_tokens)
        keep()
    if args.verify:
        report["verify_lone_greedy"] = verify_case(args.model, 128, args.rounds)
    if args.replay:
        eng = Engine.load(args.model)
        try:
            report["lookup_replay"] = lookup_replay(eng, 128)
        finally:
            eng.close()
    print(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
