"""What Tandem's kernels (int8 activations, issue 51) cost in accuracy: the
bundled model's perplexity on a fixed slice of real text (the first
`--tokens` tokens of the Python standard library's own documentation,
pydoc_data/topics.py, which every Python ships), run through the float32
copy (the reference), MLX's quantized matmul and Tandem's kernels, on the
CPU, 512-token chunks. Also prints each path's wall time (noisy: one pass).

Run: .venv/bin/python benchmarks/cpu_matmul_accuracy.py [--tokens 2048]
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=2048)
    args = parser.parse_args()
    if qmm.kernels() is None:
        sys.exit(f"the kernels are not used: {qmm.status()[1]}")
    loaded = load_model("default")
    text = "\n".join(topics.topics[k] for k in sorted(topics.topics))
    ids = loaded.tokenizer.encode(text)[:args.tokens]
    out = {}
    for name in ("float32", "mlx", "tandem"):
        model = load_model("default", "float32").model if name == "float32" else loaded.model
        if name == "tandem":
            qmm.install(model)
        started = time.perf_counter()
        out[name] = {"perplexity": round(perplexity(model, ids), 4),
                     "seconds": round(time.perf_counter() - started, 1)}
        print(json.dumps({name: out[name]}), flush=True)
    for name in ("mlx", "tandem"):
        out[name]["vs_float32"] = round(out[name]["perplexity"] / out["float32"]["perplexity"], 4)
    print(json.dumps({"tokens": len(ids), "isa": qmm.kernels().isa(),
                      "date": time.strftime("%Y-%m-%d %H:%M"), **out}))


if __name__ == "__main__":
    main()
