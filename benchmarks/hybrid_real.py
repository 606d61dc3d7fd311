"""Real lanes: GPU-only vs hybrid (cost-aware) on the multi-tab chat workload,
and whether a GPU lane and a CPU lane really step at the same time.

On a machine with an MLX GPU (Metal on macOS, CUDA on Linux):
  python benchmarks/hybrid_real.py --model synthetic-qwen2.5-0.5b [--tabs 16]
Without one, --stand-in makes a second CPU lane act as the GPU: that checks
the script end to end, it measures no CPU/GPU speed-up.

`--model synthetic-qwen2.5-0.5b` builds (once, in --work-dir) a model with
Qwen2.5-0.5B-Instruct's shapes (the reference engine's model) and random
weights, 4-bit like mlx-community's build: the same compute as the real model,
no download (the GPU machines here reach no hub). Its answers are noise;
answer lengths come from the workload. `--model default` or a path works too.

Each mode runs the same workload (engine/sim/workload.py, think time scaled
by --think-scale) on a fresh engine; modes alternate for --repeats rounds, so
both see the same machine. Ratios are hybrid / GPU-only within a round.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.chat_tabs import WORDS, play  # noqa: E402
from engine import Engine, LaneSpec, Migrated, SamplingParams  # noqa: E402
from engine.core.router import Placement  # noqa: E402
from engine.models.loader import load_model  # noqa: E402
from engine.sim import chat_workload  # noqa: E402

QWEN_0_5B = {  # Qwen2.5-0.5B-Instruct's config.json, weights aside
    "model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24,
    "intermediate_size": 4864, "num_attention_heads": 14, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-6, "vocab_size": 151936, "max_position_embeddings": 32768,
    "rope_theta": 1000000.0, "tie_word_embeddings": True,
}


def synthetic_model(work_dir: Path, config: dict, layers: int | None = None) -> Path:
    """A random model with `config`'s shapes, 4-bit (group 64), in HF layout."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten
    from mlx_lm.models import qwen2

    from tests.tiny_model import build_tokenizer

    config = dict(config, num_hidden_layers=layers or config["num_hidden_layers"])
    path = work_dir / f"synthetic-{config['model_type']}-{config['hidden_size']}x" \
                      f"{config['num_hidden_layers']}"
    if (path / "model.safetensors").exists():
        return path
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(path)
    config["eos_token_id"] = tokenizer.convert_tokens_to_ids("<|im_end|>")
    mx.random.seed(0)
    model = qwen2.Model(qwen2.ModelArgs.from_dict(config))
    nn.quantize(model, group_size=64, bits=4)
    mx.save_safetensors(str(path / "model.safetensors"), dict(tree_flatten(model.parameters())))
    config["quantization"] = {"group_size": 64, "bits": 4}
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path


class PinnedPolicy:
    """Every phase on one lane (the overlap check)."""

    name = "pinned"

    def __init__(self, lane: str):
        self.lane = lane

    def place(self, request, lanes):
        return Placement(self.lane, "pinned", decode_lane=self.lane)

    def place_decode(self, request, current, lanes):
        return Placement(current, "pinned: decode where it prefilled")

    def reconsider(self, request, current, lanes):
        return None


def make_engine(source: str, stand_in: bool, mode: str, policy=None) -> Engine:
    gpu = LaneSpec("gpu", "cpu", "float32", acts_as="gpu") if stand_in else LaneSpec("gpu", "gpu")
    engine = Engine(load_model(source), lanes=[gpu, LaneSpec("cpu", "cpu")], mode=mode,
                    policy=policy)
    engine.wait_ready(300, every_lane=True)  # measure served work, not start-up
    return engine


def overlap(source: str, stand_in: bool, tokens: int = 64) -> dict:
    """One decode alone on each lane, then one on each lane at once.
    serial = t_gpu + t_cpu; parallel = max(t_gpu, t_cpu); measured = t_both."""
    engine = make_engine(source, stand_in, "hybrid", PinnedPolicy("gpu"))
    params = SamplingParams(max_tokens=tokens)
    messages = [{"role": "user", "content": " ".join(WORDS)}]
    alone = {}
    try:
        for lane in ("gpu", "cpu", "gpu", "cpu"):  # the first of each warms up
            engine.policy = PinnedPolicy(lane)
            t = time.perf_counter()
            engine.generate(messages, params)
            alone[lane] = time.perf_counter() - t
        handles = []
        t = time.perf_counter()
        for lane in ("gpu", "cpu"):
            engine.policy = PinnedPolicy(lane)
            handles.append(engine.submit(messages, params))
        lanes = [h.result().lanes[-1][1] for h in handles]
        both = time.perf_counter() - t
    finally:
        engine.close()
    serial, parallel = alone["gpu"] + alone["cpu"], max(alone.values())
    return {"gpu_alone_s": alone["gpu"], "cpu_alone_s": alone["cpu"], "both_s": both,
            "lanes": lanes, "overlap": (serial - both) / max(serial - parallel, 1e-9)}


def run_workload(source: str, stand_in: bool, mode: str, tabs, max_answer: int,
                 learn_contention: bool = True) -> dict:
    engine = make_engine(source, stand_in, mode)
    for lane in engine.lanes.values():
        lane.cost.learn_contention = learn_contention
    migrations = []
    engine.subscribe(lambda e: migrations.append(1) if isinstance(e, Migrated) else None)
    finished, wall = play(engine, tabs, max_answer)
    lane_tokens = {n: lane.stats.output_tokens for n, lane in engine.lanes.items()}
    learned = {n: {"contention": lane.cost.contention,
                   "contended_steps": lane.cost.contended_samples,
                   "quiet_steps": lane.cost.samples - lane.cost.contended_samples,
                   "mean_abs_error": lane.cost.mean_abs_error}
               for n, lane in engine.lanes.items() if lane.cost is not None}
    router_ms = 1000 * engine.router_s / max(sum(l.stats.steps for l in engine.lanes.values()), 1)
    engine.close()
    completion = sorted(f.e2e_s for f in finished)
    ttft = sorted(f.ttft_s for f in finished if f.ttft_s is not None)
    pick = lambda xs, q: xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]  # noqa: E731
    output = sum(f.output_tokens for f in finished)
    return {"mode": mode, "learn_contention": learn_contention, "requests": len(finished),
            "output_tokens": output, "wall_s": wall, "throughput_tok_s": output / wall,
            "completion_s": {"mean": statistics.fmean(completion), "p50": pick(completion, .5),
                             "p95": pick(completion, .95)},
            "ttft_s": {"mean": statistics.fmean(ttft), "p50": pick(ttft, .5),
                       "p95": pick(ttft, .95)},
            "output_tokens_by_lane": lane_tokens, "migrations": len(migrations),
            "cost_models": learned,
            "router_ms_per_step": router_ms}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="synthetic-qwen2.5-0.5b")
    parser.add_argument("--layers", type=int, default=None,
                        help="synthetic model: fewer layers (quick checks)")
    parser.add_argument("--work-dir", default=str(ROOT / "build" / "bench-models"))
    parser.add_argument("--stand-in", action="store_true",
                        help="no GPU: a CPU lane acts as the GPU (checks the script only)")
    parser.add_argument("--tabs", type=int, default=16)
    parser.add_argument("--max-answer", type=int, default=128)
    parser.add_argument("--think-scale", type=float, default=0.25)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--ablate-contention", action="store_true",
                        help="also run hybrid with online contention learning off "
                             "(the start-up probe still measures it)")
    args = parser.parse_args()

    from engine import gpu_available

    if not args.stand_in and not gpu_available():
        raise SystemExit("MLX has no GPU here; use --stand-in to check the script")
    source = args.model
    if source == "synthetic-qwen2.5-0.5b":
        source = str(synthetic_model(Path(args.work_dir), QWEN_0_5B, args.layers))
    tabs = chat_workload(args.tabs, seed=0, think_mean_s=6.0 * args.think_scale,
                         arrival_window_s=20.0 * args.think_scale)
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
              "date": time.strftime("%Y-%m-%d"), "model": args.model, "source": source,
              "stand_in": args.stand_in, "tabs": args.tabs, "max_answer": args.max_answer,
              "overlap": overlap(source, args.stand_in), "rounds": []}
    for _ in range(args.repeats):
        runs = [("gpu-only", "gpu-only", True), ("hybrid", "hybrid", True)]
        if args.ablate_contention:
            runs.append(("hybrid-no-contention-learning", "hybrid", False))
        round_ = {name: run_workload(source, args.stand_in, mode, tabs, args.max_answer, learn)
                  for name, mode, learn in runs}
        g = round_["gpu-only"]
        for name, _, _ in runs[1:]:
            h = round_[name]
            round_[f"{name}_over_gpu_only"] = {
                "throughput": h["throughput_tok_s"] / g["throughput_tok_s"],
                "mean_completion": h["completion_s"]["mean"] / g["completion_s"]["mean"],
                "mean_ttft": h["ttft_s"]["mean"] / g["ttft_s"]["mean"]}
        result["rounds"].append(round_)
        print(json.dumps({k: v for k, v in round_.items() if k.endswith("_over_gpu_only")}),
              file=sys.stderr, flush=True)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
