"""What Tandem's kernels (int8 activations, issue 51) cost in accuracy: the
bundled model's perplexity on a fixed slice of real text (the first
`--tokens` tokens of the Python standard library's own documentation,
pydoc_data/topics.py, which every Python ships), run through the float32
copy (the reference), MLX's quantized matmul and Tandem's kernels, on the
CPU, 512-token chunks (rows enough for the kernels' sgemm path); then the
greedy answers of the float32 copy and Tandem's kernels to `--prompts` chat
prompts (`--answer` tokens each, a decode row at a time: the int16 path),
their agreement: how many answers are the same, and the share of tokens
before the first difference. Also prints each path's wall time (noisy: one
pass).

Run: .venv/bin/python benchmarks/cpu_matmul_accuracy.py [--tokens 2048] [--prompts 20]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: E402,F401  (the system OpenBLAS, before mlx)
import mlx.core as mx  # noqa: E402
import pydoc_data.topics as topics  # noqa: E402

from engine.models.loader import load_model  # noqa: E402
from engine.runtime import qmm  # noqa: E402


def perplexity(model, ids: list[int], chunk: int = 512) -> float:
    nll, n = 0.0, 0
    with mx.stream(mx.cpu):
        for i in range(0, len(ids) - 1, chunk):
            piece = mx.array([ids[i:i + chunk + 1]])
            logits = model(piece[:, :-1]).astype(mx.float32)
            logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
            target = piece[:, 1:]
            nll -= mx.take_along_axis(logp, target[..., None], axis=-1).sum().item()
            n += target.size
    return math.exp(nll / n)


PROMPTS = [
    "What is the capital of France?", "Write a haiku about autumn.",
    "Explain what a hash table is.", "Give me three tips for better sleep.",
    "What does the Python keyword yield do?", "Translate 'good morning' into Spanish.",
    "Summarise the plot of Romeo and Juliet.", "Why is the sky blue?",
    "Write a short email asking for a day off.", "What is 17 times 23?",
    "Name five fruits that are red.", "How do vaccines work?",
    "Describe a cat to someone who has never seen one.", "What is a prime number?",
    "Suggest a name for a coffee shop.", "How do I reverse a list in Python?",
    "What causes the seasons on Earth?", "Tell me a joke about computers.",
    "What is the difference between weather and climate?", "List the planets in order.",
]


def greedy(model, tokenizer, prompt: str, tokens: int) -> list[int]:
    from mlx_lm.models.cache import make_prompt_cache

    ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                        add_generation_prompt=True)
    cache = make_prompt_cache(model)
    out: list[int] = []
    with mx.stream(mx.cpu):
        logits = model(mx.array([ids]), cache=cache)
        for _ in range(tokens):
            token = int(mx.argmax(logits[0, -1]).item())
            out.append(token)
            if token in tokenizer.eos_token_ids:
                break
            logits = model(mx.array([[token]]), cache=cache)
    return out


def agreement(reference: list[list[int]], other: list[list[int]]) -> dict:
    same, prefix = 0, []
    for a, b in zip(reference, other):
        common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        same += a == b
        prefix.append(common / max(len(a), 1))
    return {"same_answers": f"{same}/{len(reference)}",
            "tokens_before_first_difference": round(sum(prefix) / len(prefix), 3)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--answer", type=int, default=48)
    parser.add_argument("--no-mlx", action="store_true", help="skip MLX's op (minutes here)")
    parser.add_argument("--integer-path", action="store_true",
                        help="the perplexity's chunks on the integer path (quantized "
                             "activations, as decode steps) instead of dequantized panels")
    parser.add_argument("--isas", default="",
                        help="the kernels' instruction sets to compare, e.g. avx2,avx512vnni "
                             "(int16 vs int8 activations); default: the one detected")
    args = parser.parse_args()
    if qmm.kernels() is None:
        sys.exit(f"the kernels are not used: {qmm.status()[1]}")
    isas = [i for i in args.isas.split(",") if i] or [qmm.kernels().isa()]
    loaded = load_model("default")
    text = "\n".join(topics.topics[k] for k in sorted(topics.topics))
    ids = loaded.tokenizer.encode(text)[:args.tokens]
    out, answers = {}, {}
    dense = load_model("default", "float32").model
    ours = [f"tandem-{isa}" for isa in isas]
    for name in ["float32"] + ([] if args.no_mlx else ["mlx"]) + ours:
        model = dense if name == "float32" else loaded.model
        if name.startswith("tandem"):
            qmm.install(model)
            qmm.kernels().force_isa(name.removeprefix("tandem-"))
            if args.integer_path:
                qmm.kernels().set_sgemm_rows(1 << 30)
        started = time.perf_counter()
        out[name] = {"perplexity": round(perplexity(model, ids), 4),
                     "seconds": round(time.perf_counter() - started, 1)}
        if name != "mlx":  # MLX's op: seconds a token here
            answers[name] = [greedy(model, loaded.tokenizer, p, args.answer)
                             for p in PROMPTS[:args.prompts]]
        print(json.dumps({name: out[name]}), flush=True)
    for name in ours:
        out[name]["greedy_vs_float32"] = agreement(answers["float32"], answers[name])
    for name in [n for n in ["mlx"] + ours if n in out]:
        out[name]["vs_float32"] = round(out[name]["perplexity"] / out["float32"]["perplexity"], 4)
    print(json.dumps({"tokens": len(ids), "isas": isas,
                      "path": "integer" if args.integer_path else "by rows",
                      "date": time.strftime("%Y-%m-%d %H:%M"), **out}))


if __name__ == "__main__":
    main()
