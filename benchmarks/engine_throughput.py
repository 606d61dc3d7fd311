"""Engine vs mlx-lm: decode, N-stream and prefill tokens/s.

Run: .venv/bin/python benchmarks/engine_throughput.py [--tokens 128] [--streams 8]
         [--model default|tiny-24x64|PATH]

`tiny-24x64` is a random 24-layer, 64-wide llama (tests/tiny_model.py): so
little compute per layer that the host's work per step sets the speed, as for
a small model on a fast GPU. `--lane gpu` runs the engine's lane on MLX's GPU
(Metal / CUDA); `--solo-ab` also times single-stream decode with the lone-
request path off (`LaneConfig(solo_decode=False)`: a batch cache of one, with
its mask), alternating with the others. Per engine phase it reports the lane
thread's host time and device wait per step (LaneStats.host_s / wait_s).

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

import engine  # noqa: E402,I001  (first: it loads the system OpenBLAS before MLX)
import mlx.core as mx  # noqa: E402
from mlx_lm import stream_generate  # noqa: E402
from mlx_lm.generate import BatchGenerator  # noqa: E402

from engine import Engine, LaneConfig, LaneSpec, SamplingParams  # noqa: E402
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


class StepClock:
    """Host time and device wait per step of one lane over a phase."""

    def __init__(self, lane):
        self.lane, self.host, self.wait = lane, [], []

    def __enter__(self):
        st = self.lane.stats
        self.start = (st.host_s, st.wait_s, st.steps)
        return self

    def __exit__(self, *exc):
        st = self.lane.stats
        steps = max(st.steps - self.start[2], 1)
        self.host.append((st.host_s - self.start[0]) / steps * 1e3)
        self.wait.append((st.wait_s - self.start[1]) / steps * 1e3)

    def summary(self):
        med = statistics.median
        return {"host_ms_per_step": med(self.host), "device_wait_ms_per_step": med(self.wait)}


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
    parser.add_argument("--model", default="default",
                        help="default, tiny-24x64 (overhead-bound) or a model path")
    parser.add_argument("--lane", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--solo-ab", action="store_true",
                        help="also single-stream with the lone-request path off")
    parser.add_argument("--engine-only", action="store_true",
                        help="only engine vs mlx-lm (skip weight formats and the BLAS check)")
    args = parser.parse_args()

    model_path = args.model
    if model_path == "tiny-24x64":
        import tempfile

        from tests.tiny_model import build_tiny_llama
        model_path = str(build_tiny_llama(Path(tempfile.mkdtemp()) / "tiny", num_layers=24,
                                          hidden=64, max_positions=4096))
        args.engine_only = True
    weights = "float32" if args.lane == "cpu" else "auto"
    loaded = load_model(model_path)
    eng = Engine(loaded, lanes=[LaneSpec(args.lane, args.lane, weights)])
    eng.wait_ready(300, every_lane=True)
    print(f"engine lane warm-up {eng.lanes[args.lane].warm_up_seconds:.2f} s", file=sys.stderr,
          flush=True)
    model = eng.lanes[args.lane].model
    off = None
    if args.solo_ab:
        off = Engine(loaded, lanes=[LaneSpec(args.lane, args.lane, weights,
                                             LaneConfig(solo_decode=False))])
        off.wait_ready(300, every_lane=True)
        engine_single(off, prompts(loaded.tokenizer, 1)[0], 8)
    tokenizer = eng.tokenizer
    ids = prompts(tokenizer, 1)[0]
    batch = prompts(tokenizer, args.streams)
    stop_ids = sorted(eng.model_info.stop_token_ids)

    # Warm up both paths once.
    engine_single(eng, ids, 8)
    mlx_single(model, tokenizer, ids, 8)

    single_e, single_m, single_off, batch_e, batch_m = [], [], [], [], []
    lane = eng.lanes[args.lane]
    single_clock, batch_clock = StepClock(lane), StepClock(lane)
    off_clock = StepClock(off.lanes[args.lane]) if off else None
    for _ in range(args.repeats):
        eng.prefix_cache.clear()
        with single_clock:
            single_e.append(engine_single(eng, ids, args.tokens)[0])
        single_m.append(mlx_single(model, tokenizer, ids, args.tokens)[0])
        if off is not None:
            off.prefix_cache.clear()
            with off_clock:
                single_off.append(engine_single(off, ids, args.tokens)[0])
        eng.prefix_cache.clear()
        with batch_clock:
            batch_e.append(engine_batch(eng, batch, args.tokens)[0])
        batch_m.append(mlx_batch(model, batch, args.tokens, stop_ids)[0])
    if off is not None:
        off.close()
    pre_e, pre_m = zip(*(prefill_rates(eng, model, tokenizer, args.prefill_tokens)
                         for _ in range(args.repeats)))
    eng.close()

    med = statistics.median
    result = {
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d"),
        "mlx": mx.__version__,
        "model": args.model,
        "lane": args.lane,
        "repeats": args.repeats,
        "single_stream_decode_tps": {"engine": med(single_e), "mlx_lm_stream_generate": med(single_m),
                                     "ratio": med(single_e) / med(single_m),
                                     "runs_engine": single_e, "runs_mlx_lm": single_m,
                                     **single_clock.summary()},
        f"{args.streams}_stream_aggregate_tps": {"engine": med(batch_e),
                                                 "mlx_lm_BatchGenerator": med(batch_m),
                                                 "ratio": med(batch_e) / med(batch_m),
                                                 "runs_engine": batch_e, "runs_mlx_lm": batch_m,
                                                 **batch_clock.summary()},
        f"prefill_{args.prefill_tokens}_tps": {"engine": med(pre_e), "mlx_lm": med(pre_m),
                                               "ratio": med(pre_e) / med(pre_m)},
    }
    if off is not None:
        result["single_stream_solo_off_tps"] = {
            "engine_solo_off": med(single_off), "ratio_to_mlx_lm": med(single_off) / med(single_m),
            "solo_on_over_off": med(single_e) / med(single_off), **off_clock.summary()}
    if not args.engine_only:
        result["weight_formats_mlx_lm"] = weight_formats(ids, args.tokens)
        result["blas"] = blas_effect()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
