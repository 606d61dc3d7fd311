"""Quantized matmul on MLX's CPU stream: Tandem's kernels (issue 51) against
MLX's own `mx.quantized_matmul` and the float32 copy on OpenBLAS (what the
CPU lane runs today where it fits), the same weights, measured here.

Run: .venv/bin/python benchmarks/cpu_matmul.py [--rounds 3] [--rows 1,2,4,16,64,256]

Shapes: the bundled SmolLM2-135M's MLP (576 -> 1536), a 1-3B model's
attention (2048 x 2048) and a 7-8B model's MLP (4096 -> 14336), 4-bit with
groups of 32 (what Tandem's GGUF loader makes of Q4_0/Q4_1/Q4_K) and 8-bit
groups of 32 (Q8_0). Each path's time is the median of `--rounds` rounds of
timed calls, the paths alternated within a round; ratios are against MLX's
op and against float32, measured in the same round; `int16` and `sgemm` are
the kernels' two paths forced (rows from ext.sgemm_rows() take sgemm), to
place the threshold. The kernels' pool and OpenBLAS use every core.
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

import engine  # noqa: E402,F401  (the system OpenBLAS, before mlx)
import mlx.core as mx  # noqa: E402

from engine.runtime import qmm  # noqa: E402

SHAPES = {"smollm2-mlp": (576, 1536), "2048x2048": (2048, 2048), "7b-mlp": (4096, 14336)}


def timed(fn, seconds: float = 0.3) -> float:
    mx.eval(fn())
    calls, started = 0, time.perf_counter()
    while True:
        mx.eval(fn())
        calls += 1
        spent = time.perf_counter() - started
        if spent >= seconds and calls >= 3:
            return spent / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", default="1,2,4,16,64,256")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--no-mlx", action="store_true",
                        help="skip MLX's op (seconds a call at hundreds of rows)")
    args = parser.parse_args()
    ext = qmm.kernels()
    if ext is None:
        sys.exit(f"the kernels are not used: {qmm.status()[1]}")
    mx.set_default_device(mx.cpu)
    default_rows = ext.sgemm_rows()
    rows = [int(r) for r in args.rows.split(",")]
    results = []
    for shape in args.shapes.split(","):
        K, N = SHAPES[shape]
        w32 = mx.random.normal((N, K), key=mx.random.key(1)) * 0.02
        for bits in (4, 8):
            w, s, b = mx.quantize(w32, group_size=32, bits=bits)
            mx.eval(w, s, b, w32)
            for M in rows:
                x = mx.random.normal((M, K), key=mx.random.key(M))
                def ours(rows_from):
                    def call():
                        ext.set_sgemm_rows(rows_from)
                        return ext.quantized_matmul(x, w, s, b, 32, bits)
                    return call

                paths = {
                    "tandem": ours(default_rows),  # the path the kernels pick
                    "int16": ours(10 ** 9),  # the integer kernels, forced
                    "sgemm": ours(1),  # dequantized panels + sgemm, forced
                    "mlx": lambda: mx.quantized_matmul(x, w, s, b, transpose=True,
                                                       group_size=32, bits=bits),
                    "float32": lambda: x @ w32.T,
                }
                if args.no_mlx:
                    del paths["mlx"]
                times = {name: [] for name in paths}
                for round_ in range(args.rounds):
                    order = list(paths) if round_ % 2 == 0 else list(reversed(paths))
                    for name in order:
                        times[name].append(timed(paths[name]))
                med = {name: statistics.median(t) for name, t in times.items()}
                row = {"shape": shape, "bits": bits, "rows": M,
                       **{f"{name}_ms": round(v * 1e3, 3) for name, v in med.items()},
                       **({"vs_mlx": round(med["mlx"] / med["tandem"], 2)}
                          if "mlx" in med else {}),
                       "vs_float32": round(med["float32"] / med["tandem"], 2)}
                results.append(row)
                print(json.dumps(row), flush=True)
    print(json.dumps({"machine": f"{platform.machine()} {platform.node()}",
                      "isa": ext.isa(), "mlx": mx.__version__,
                      "date": time.strftime("%Y-%m-%d %H:%M")}))


if __name__ == "__main__":
    main()
