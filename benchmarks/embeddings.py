"""Embeddings throughput (issue 35): texts per second through Tandem (the
engine's lane, as /v1/embeddings runs them: length-sorted padded batches)
beside the embedding library's own batch call (mlx-embeddings 0.1.0's BERT:
the tokenizer pads a batch, one model call) on the same model files, and the
vectors' agreement (min cosine). Alternated, same run. Measured.

Run: .venv/bin/python benchmarks/embeddings.py [--texts 1024] [--batch 64] [--rounds 3]

The model: random weights with all-MiniLM-L6-v2's shape (6 layers, 384 wide,
12 heads, a 30k WordPiece vocabulary is replaced by the test corpus's:
the vocabulary's size does not change an encoder pass).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: E402,I001  (first: it loads the system OpenBLAS before MLX)
import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

from engine import Engine, LaneSpec, load_embedding_model, load_model  # noqa: E402
from tests.embedding_models import build_bert, reference_bert  # noqa: E402
from tests.tiny_model import CORPUS, build_tiny_llama  # noqa: E402


def texts_of(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = " ".join(CORPUS).split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 120))) for _ in range(n)]


def library(model, tokenizer, texts: list[str], batch: int):
    out = []
    for i in range(0, len(texts), batch):
        enc = tokenizer(texts[i:i + batch], padding=True, truncation=True, max_length=512,
                        return_tensors="np")
        vectors = model(mx.array(enc["input_ids"]),
                        attention_mask=mx.array(enc["attention_mask"])).text_embeds
        mx.eval(vectors)
        out.append(np.array(vectors))
    return np.concatenate(out)


def tandem(eng: Engine, texts: list[str], batch: int):
    handles = [eng.embed(texts[i:i + batch]) for i in range(0, len(texts), batch)]
    return np.concatenate([h.result(600).vectors for h in handles])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64, help="texts per request / library call")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tandem-emb-"))
    path = build_bert(work / "minilm-shape", layers=6, hidden=384, heads=12, positions=512)
    ref, tokenizer = reference_bert(path)
    chat = build_tiny_llama(work / "chat")
    eng = Engine(load_model(str(chat)), lanes=[LaneSpec("cpu", "cpu", "float32")],
                 embedding_model=load_embedding_model(str(path)))
    eng.wait_ready(300)
    texts = texts_of(args.texts)
    tandem(eng, texts[:64], args.batch), library(ref, tokenizer, texts[:64], args.batch)  # warm
    rates = {"tandem": [], "library": []}
    for r in range(args.rounds):
        for kind in (("tandem", "library") if r % 2 == 0 else ("library", "tandem")):
            started = time.perf_counter()
            got = (tandem(eng, texts, args.batch) if kind == "tandem"
                   else library(ref, tokenizer, texts, args.batch))
            rates[kind].append(len(texts) / (time.perf_counter() - started))
            if kind == "tandem":
                ours = got
            else:
                theirs = got
    eng.close()
    cos = (ours * theirs).sum(-1) / np.linalg.norm(ours, axis=-1) / np.linalg.norm(theirs, axis=-1)
    med = {k: statistics.median(v) for k, v in rates.items()}
    report = {"machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores",
              "date": time.strftime("%Y-%m-%d"), "texts": args.texts, "batch": args.batch,
              "texts_per_s": {k: [round(x, 1) for x in v] for k, v in rates.items()},
              "median_tandem_over_library": round(med["tandem"] / med["library"], 3),
              "min_cosine": float(cos.min())}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
