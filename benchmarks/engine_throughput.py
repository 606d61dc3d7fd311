"""Engine vs mlx-lm on the default model: decode, 8-stream and prefill tokens/s.

Run: .venv/bin/python benchmarks/engine_throughput.py [--tokens 128] [--streams 8]

Each comparison runs both sides in the same process, on the same model object
and prompts, alternating, and reports the ratio (machines are shared and
noisy; ratios from one run are what count). Greedy decoding throughout.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx  # noqa: E402
from mlx_lm import stream_generate  # noqa: E402
from mlx_lm.generate import BatchGenerator  # noqa: E402

import engine  # noqa: E402  (OpenBLAS preload first)
from engine import Engine, LaneSpec, SamplingParams  # noqa: E402
from engine.models.loader import load_model  # noqa: E402

QUESTIONS = [
    "Write a long story about a lighthouse keeper.",
    "Explain how a bicycle works, in detail.",
    "Describe the water cycle step by step.",
    "Write a poem about autumn leaves.",
    "List ten facts about the Moon and explain each.",
    "Tell me about the history of the printing press.",
    "How do plants make food? Explain in detail.",
    "Write a letter to a friend about a trip to the mountains.",
]


def prompts(tokenizer, n):
    return [list(tokenizer.apply_chat_template([{"role": "user", "content": q}],
                                                add_generation_prompt=True))
            for q in (QUESTIONS * 4)[:n]]


def engine_single(eng, ids, max_tokens):
    done = eng.generate(prompt_ids=ids, params=SamplingParams(max_tokens=max_tokens))
    return (done.output_tokens - 1) / (done.e2e_s - done.ttft_s), done.output_tokens


def mlx_single(model, tokenizer, ids, max_tokens):
    last = None
    for last in stream_generate(model, tokenizer, ids, max_tokens=max_tokens):
        pass
    return last.generation_tps, last.generation_tokens


def engine_batch(eng, batch, max_tokens):
    start = time.perf_counter()
    handles = [eng.submit(prompt_ids=p, params=SamplingParams(max_tokens=max_tokens))
               for p in batch]
    total = sum(h.result().output_tokens for h in handles)
    return total / (time.perf_counter() - start), total


def mlx_batch(model, batch, max_tokens, stop_ids):
    gen = BatchGenerator(model, max_tokens=max_tokens, stop_tokens=[[t] for t in stop_ids])
    start = time.perf_counter()
    uids = gen.insert(batch, [max_tokens] * len(batch))
    remaining, total = set(uids), 0
    while remaining:
        for r in gen.next_generated():
            total += 1
            if r.finish_reason is not None:
                remaining.discard(r.uid)
    elapsed = time.perf_counter() - start
    gen.close()
    return total / elapsed, total


def prefill_rates(eng, model, tokenizer, n_tokens):
    text = " ".join(QUESTIONS * 40)
    ids = tokenizer.encode(text)[:n_tokens]
    eng.prefix_cache.clear()
    done = eng.generate(prompt_ids=ids, params=SamplingParams(max_tokens=1))
    engine_rate = len(ids) / done.ttft_s
    last = None
    for last in stream_generate(model, tokenizer, ids, max_tokens=1):
        pass
    return engine_rate, last.prompt_tps


def weight_formats(tokenizer_ids, max_tokens):
    rows = {}
    for fmt in ("quantized", "float32", "float16", "bfloat16"):
        loaded = load_model("default", weight_format=fmt)
        decode, prefill = [], []
        for _ in range(2):
            last = None
            for last in stream_generate(loaded.model, loaded.tokenizer, tokenizer_ids,
                                        max_tokens=max_tokens):
                pass
            decode.append(last.generation_tps)
            prefill.append(last.prompt_tps)
        rows[fmt] = {"decode_tps": max(decode), "prefill_tps": max(prefill)}
    return rows


def blas_effect() -> dict:
    """Matmul and prefill with and without the OpenBLAS preload (subprocesses)."""
    code = (
        "import time, engine, mlx.core as mx\n"
        "a = mx.random.normal((1024, 1024)); mx.eval(a)\n"
        "mx.eval(a @ a); t = time.perf_counter()\n"
        "for _ in range(5): mx.eval(a @ a)\n"
        "mm = (time.perf_counter() - t) / 5\n"
        "from engine.models.loader import load_model\n"
        "from mlx_lm import stream_generate\n"
        "lm = load_model('default', weight_format='float32')\n"
        "ids = lm.tokenizer.encode('the quick brown fox jumps over the lazy dog ' * 30)[:256]\n"
        "last = None\n"
        "for last in stream_generate(lm.model, lm.tokenizer, ids, max_tokens=1): pass\n"
        "print(mm, last.prompt_tps)\n"
    )
    out = {}
    for label, flag in (("openblas", "0"), ("bundled", "1")):
        env = dict(os.environ, TANDEM_NO_OPENBLAS=flag)
        res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, cwd=Path(__file__).resolve().parents[1], check=True)
        mm, tps = map(float, res.stdout.split())
        out[label] = {"matmul_1024_s": mm, "prefill_tps": tps}
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prefill-tokens", type=int, default=512)
    parser.add_argument("--engine-only", action="store_true",
                        help="only engine vs mlx-lm (skip weight formats and the BLAS check)")
    args = parser.parse_args()

    eng = Engine.load("default", lanes=[LaneSpec("cpu", "cpu", "float32")])
    model = eng.lanes["cpu"].model
    tokenizer = eng.tokenizer
    ids = prompts(tokenizer, 1)[0]
    batch = prompts(tokenizer, args.streams)
    stop_ids = sorted(eng.model_info.stop_token_ids)

    # Warm up both paths once.
    engine_single(eng, ids, 8)
    mlx_single(model, tokenizer, ids, 8)

    single_e, single_m, batch_e, batch_m = [], [], [], []
    for _ in range(args.repeats):
        eng.prefix_cache.clear()
        single_e.append(engine_single(eng, ids, args.tokens)[0])
        single_m.append(mlx_single(model, tokenizer, ids, args.tokens)[0])
        eng.prefix_cache.clear()
        batch_e.append(engine_batch(eng, batch, args.tokens)[0])
        batch_m.append(mlx_batch(model, batch, args.tokens, stop_ids)[0])
    pre_e, pre_m = zip(*(prefill_rates(eng, model, tokenizer, args.prefill_tokens)
                         for _ in range(args.repeats)))
    eng.close()

    med = statistics.median
    result = {
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d"),
        "mlx": mx.__version__,
        "single_stream_decode_tps": {"engine": med(single_e), "mlx_lm_stream_generate": med(single_m),
                                     "ratio": med(single_e) / med(single_m)},
        f"{args.streams}_stream_aggregate_tps": {"engine": med(batch_e),
                                                 "mlx_lm_BatchGenerator": med(batch_m),
                                                 "ratio": med(batch_e) / med(batch_m)},
        f"prefill_{args.prefill_tokens}_tps": {"engine": med(pre_e), "mlx_lm": med(pre_m),
                                               "ratio": med(pre_e) / med(pre_m)},
    }
    if not args.engine_only:
        result["weight_formats_mlx_lm"] = weight_formats(ids, args.tokens)
        result["blas"] = blas_effect()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
