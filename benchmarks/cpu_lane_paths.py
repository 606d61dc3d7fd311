"""A CPU lane's three matmul paths on the bundled 4-bit model (issue 51):
a float32 copy on OpenBLAS (today's default here), MLX's quantized op and
Tandem's kernels (TANDEM_CPU_MATMUL=float32|mlx|tandem), each in its own
process with a fresh engine of one CPU lane, the paths alternated round by
round: one stream's decode tokens/s (greedy, `--tokens`, drafts off), 16
streams' aggregate decode tokens/s, and the prefill tokens/s of a ~600-token
prompt. Ratios are against the first path of the same round (float32 by
default). `--paths tandem,tandem-int8,tandem-avx2`: "tandem-int8" is Tandem's
kernels with TANDEM_CPU_ACTIVATIONS=int8 (the AVX-512 VNNI kernels, int8
activations), "tandem-avx2" with TANDEM_CPU_KERNELS=avx2 (no VNNI),
"tandem-unpacked" with TANDEM_CPU_PACK=0 (MLX's layout, not the lane's packed one).

Run: .venv/bin/python benchmarks/cpu_lane_paths.py [--rounds 3] [--tokens 96]
     [--paths float32,mlx,tandem] [--model PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATHS = ("float32", "mlx", "tandem", "tandem-int8", "tandem-avx2", "tandem-unpacked")
STORY = "Tell me a long story about a lighthouse keeper and the sea."
PASTE = " ".join(["The tide came in over the rocks while the keeper counted the ships."] * 40)


def one(tokens: int, model: str = "default") -> dict:
    sys.path.insert(0, str(ROOT))
    from engine import Engine, LaneSpec, SamplingParams, cpu_matmul

    engine = Engine.load(model, lanes=[LaneSpec("cpu", "cpu")])
    try:
        engine.wait_ready(120, every_lane=True)
        greedy = SamplingParams(max_tokens=tokens, temperature=0.0)
        story = [{"role": "user", "content": STORY}]
        engine.generate(story, SamplingParams(max_tokens=8, temperature=0.0))  # warm
        done = engine.generate(story, greedy, timeout=600)
        single = done.output_tokens / (done.e2e_s - (done.ttft_s or 0.0))
        started = time.perf_counter()
        handles = [engine.submit([{"role": "user", "content": f"{STORY} Part {i}."}], greedy)
                   for i in range(16)]
        finished = [h.result(timeout=600) for h in handles]
        wall = time.perf_counter() - started
        many = sum(f.output_tokens for f in finished) / wall
        # How much of the 16 streams' time was their prompts' prefill: the
        # last first token, from submission.
        first_16 = max(f.ttft_s or 0.0 for f in finished)
        paste = engine.generate([{"role": "user", "content": PASTE}],
                                SamplingParams(max_tokens=1, temperature=0.0), timeout=600)
        prefill = (paste.prompt_tokens - paste.cached_tokens) / paste.ttft_s
        return {"decode_1": single, "decode_16": many, "prefill": prefill,
                "first_token_16_s": first_16, "wall_16_s": wall,
                "weights": engine.memory_plan.lane("cpu").weight_format,
                "cpu_matmul": cpu_matmul(), "plan_matmul": engine.memory_plan.cpu_matmul,
                "answer": done.text[:60]}
    finally:
        engine.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--one", choices=PATHS)
    parser.add_argument("--model", default="default", help="a model path (a GGUF, a folder)")
    parser.add_argument("--paths", default="float32,mlx,tandem",
                        help=f"of {', '.join(PATHS)}; ratios against the first")
    args = parser.parse_args()
    paths = tuple(p for p in args.paths.split(",") if p)
    if not paths or any(p not in PATHS for p in paths):
        parser.error(f"--paths: of {', '.join(PATHS)}")
    base = paths[0]
    if args.one:
        print(json.dumps(one(args.tokens, args.model)))
        return
    rows = []
    for round_ in range(args.rounds):
        order = paths if round_ % 2 == 0 else tuple(reversed(paths))
        got = {}
        for path in order:
            env = dict(os.environ, TANDEM_CPU_MATMUL=path.split("-")[0],
                       TANDEM_CPU_ACTIVATIONS="int8" if path.endswith("-int8") else "int16",
                       TANDEM_CPU_KERNELS="avx2" if path.endswith("-avx2") else "",
                       TANDEM_CPU_PACK="0" if path.endswith("-unpacked") else "",
                       HF_HUB_OFFLINE="1")
            out = subprocess.run([sys.executable, __file__, "--one", path, "--tokens",
                                  str(args.tokens), "--model", args.model], env=env, capture_output=True, text=True,
                                 timeout=1800, check=True).stdout
            got[path] = json.loads(out.strip().splitlines()[-1])
        row = {"round": round_, "order": order, **got,
               f"vs_{base}": {p: {k: round(got[p][k] / got[base][k], 2)
                                  for k in ("decode_1", "decode_16", "prefill")}
                              for p in paths}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps({"machine": f"{platform.machine()} {platform.node()}",
                      "date": time.strftime("%Y-%m-%d %H:%M"),
                      f"median_vs_{base}": {p: {k: statistics.median(
                          r[f"vs_{base}"][p][k] for r in rows)
                          for k in ("decode_1", "decode_16", "prefill")} for p in paths}},
                     indent=1))


if __name__ == "__main__":
    main()
