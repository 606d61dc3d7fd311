"""Tandem's few-query attention vs MLX's on the CPU (issue 51).

Run: .venv/bin/python benchmarks/cpu_attention.py [--rounds 3] [--contexts 64,1024,4000]

1. One call, us: `mx.fast.scaled_dot_product_attention` (MLX's CPU path)
   against the kernel (engine/runtime/attention.py), one query, keys and
   values a slice of a longer float32 cache as mlx-lm keeps it; the bundled
   model's heads (9 query, 3 key-value, 64 wide) and an 8B model's (32, 8,
   128); 30 chained calls an evaluation, best of the rounds.
2. The bundled model's decode step on the CPU (its quantized layers on
   Tandem's kernels, as its CPU lane runs them), ms a token after a prompt
   of each context length: TANDEM_CPU_ATTENTION=mlx and the kernel
   alternated in the same process, the same cache. Measured, wall clock.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx  # noqa: E402

from engine.runtime import attention, qmm  # noqa: E402

SHAPES = {"bundled (9/3 heads, 64)": (9, 3, 64), "8B (32/8 heads, 128)": (32, 8, 128)}


def per_call_us(fn, q, rounds: int) -> float:
    def chain():
        o = q
        for _ in range(30):
            o = fn(o)
        return o
    mx.eval(chain())
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(10):
            mx.eval(chain())
        best = min(best, (time.perf_counter() - start) / 300 * 1e6)
    return best


def calls(contexts: list[int], rounds: int) -> list[dict]:
    ext = qmm.extension()
    rows = []
    with mx.stream(mx.cpu):
        for name, (hq, hkv, d) in SHAPES.items():
            for n in contexts:
                q = mx.random.normal((1, hq, 1, d))
                k = mx.random.normal((1, hkv, n + 256, d))[:, :, :n]
                v = mx.random.normal((1, hkv, n + 256, d))[:, :, :n]
                mx.eval(q, k, v)
                scale = d ** -0.5
                mlx = per_call_us(lambda o: mx.fast.scaled_dot_product_attention(
                    o, k, v, scale=scale), q, rounds)
                ours = per_call_us(lambda o: ext.attention(o, k, v, scale), q, rounds)
                rows.append({"shape": name, "context": n, "mlx_us": round(mlx, 1),
                             "tandem_us": round(ours, 1), "speedup": round(mlx / ours, 2)})
                print(json.dumps(rows[-1]), flush=True)
    return rows


def decode(contexts: list[int], rounds: int, steps: int = 60) -> list[dict]:
    from mlx_lm.models.cache import make_prompt_cache

    from engine.models.loader import load_model

    model = load_model("default").model
    qmm.install(model)
    attention.install(model)
    rows = []
    with mx.stream(mx.cpu):
        for n in contexts:
            cache = make_prompt_cache(model)
            mx.eval(model(mx.array([[(i * 7919) % 40000 + 10 for i in range(n)]]), cache=cache))
            token = mx.array([[42]])
            got = {"mlx": [], "tandem": []}
            for r in range(rounds):
                for path in (("mlx", "tandem") if r % 2 == 0 else ("tandem", "mlx")):
                    os.environ["TANDEM_CPU_ATTENTION"] = path
                    for _ in range(3):
                        mx.eval(model(token, cache=cache))
                    start = time.perf_counter()
                    for _ in range(steps):
                        mx.eval(model(token, cache=cache))
                    got[path].append((time.perf_counter() - start) / steps * 1000)
                    for c in cache:  # the same context for every measurement
                        c.offset -= steps + 3
            rows.append({"context": n, "mlx_ms": [round(x, 2) for x in got["mlx"]],
                         "tandem_ms": [round(x, 2) for x in got["tandem"]],
                         "ratio_per_round": [round(a / b, 2) for a, b in
                                             zip(got["mlx"], got["tandem"])]})
            print(json.dumps(rows[-1]), flush=True)
    os.environ.pop("TANDEM_CPU_ATTENTION", None)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--contexts", default="64,1024,4000")
    parser.add_argument("--call-contexts", default="16,256,2048,8192")
    args = parser.parse_args()
    if qmm.extension() is None:
        raise SystemExit(f"the kernels are not used: {qmm.status()[1]} (make kernels)")
    call_rows = calls([int(c) for c in args.call_contexts.split(",")], args.rounds)
    decode_rows = decode([int(c) for c in args.contexts.split(",")], args.rounds)
    print(json.dumps({"machine": f"{platform.machine()} {platform.node()}",
                      "isa": qmm.extension().isa(), "date": time.strftime("%Y-%m-%d %H:%M"),
                      "calls": call_rows, "decode": decode_rows}, indent=1))


if __name__ == "__main__":
    main()
