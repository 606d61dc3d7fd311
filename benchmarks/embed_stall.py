"""How long a big embedding request pauses a chat on the same lane (issue 47,
defect 3): a chat streams on a tiny model while one /v1/embeddings-sized
request (`--inputs` inputs of `--tokens` token ids, cut to the encoder's
positions) runs on the same lane. The longest gap between the chat's tokens
while the embedding runs, with the lane's slices (runtime/embed.py) and as
before them (the whole request between two steps, in passes of at most
8,192 padded tokens), beside the chat's gap with no embedding. Measured.

Run: .venv/bin/python benchmarks/embed_stall.py [--inputs 256] [--tokens 1000]
     [--layers 6] [--hidden 384] [--rounds 2]

The embedding model: random weights with all-MiniLM-L6-v2's shape by default
(6 layers, 384 wide, 12 heads, 512 positions).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: E402,F401,I001  (first: it loads the system OpenBLAS before MLX)

from engine import (Engine, Finished, LaneConfig, LaneSpec, SamplingParams,  # noqa: E402
                    Token, load_embedding_model, load_model)
from engine.core.embed_place import SlicePace  # noqa: E402
from tests.embedding_models import build_bert  # noqa: E402
from tests.tiny_model import build_tiny_llama  # noqa: E402

CONTEXT = 16384  # the chat model's: it streams all along
BEFORE_TOKENS = 8192  # padded tokens a pass, as the lane ran them before the slices


def one_go(queue) -> None:
    """The lane as before issue 47: every queued job whole between two steps."""
    real = queue.run_slice
    queue.pace = SlicePace(busy=(BEFORE_TOKENS, BEFORE_TOKENS), idle=(BEFORE_TOKENS,
                                                                          BEFORE_TOKENS))

    def whole(busy, step_s):
        while queue:
            real(busy, step_s)

    queue.run_slice = whole


def stream_gaps(eng: Engine, prompt, inputs: list[list[int]] | None,
                warm: int = 8) -> tuple[float, float, int]:
    """(longest gap between the chat's tokens while the embedding ran, or over
    the chat when there is none; the embedding's seconds; slices run)."""
    times, started, ended = [], threading.Event(), threading.Event()
    chat = eng.submit(prompt, SamplingParams(max_tokens=CONTEXT - 100, temperature=0.0))

    def hear(event):
        if isinstance(event, Token) and event.request_id == chat.request_id:
            times.append(time.perf_counter())
            if len(times) >= warm:
                started.set()
        elif isinstance(event, Finished) and event.request_id == chat.request_id:
            ended.set()

    unsubscribe = eng.subscribe(hear)
    try:
        assert started.wait(120), "the chat did not stream"
        lane = eng.lanes["cpu"]
        slices = lane.embeds.slices
        begin = time.perf_counter()
        if inputs is not None:
            eng.embed(inputs).result(3600)
        else:
            time.sleep(3.0)
        end = time.perf_counter()
        slices = lane.embeds.slices - slices
        # the gap that holds `end` counts: the token after the embedding came after it
        time.sleep(0.5)
        assert not ended.is_set(), "the chat ended before the embedding did: measure less"
    finally:
        chat.cancel()
        chat.result(60)
        unsubscribe()
    during = [t for t in times if begin <= t]
    stamps = [max(t for t in times if t < begin)] + during
    gaps = [b - a for a, b in zip(stamps, stamps[1:]) if a <= end]
    return max(gaps), end - begin, slices


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--inputs", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=1000)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--step-ms", type=float, default=20.0,
                    help="the chat's decode step lasts at least this (a real model's pace)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tandem-stall-"))
    bert = build_bert(work / "minilm-shape", layers=args.layers, hidden=args.hidden,
                      heads=max(args.hidden // 32, 1), positions=512)
    chat_dir = build_tiny_llama(work / "chat", max_positions=CONTEXT)
    paced = LaneConfig(min_step_s=args.step_ms / 1000)
    eng = Engine(load_model(str(chat_dir)), lanes=[LaneSpec("cpu", "cpu", "float32", paced)],
                 embedding_model=load_embedding_model(str(bert)))
    assert eng.wait_ready(300)
    eng.director.stop_token_ids.clear()  # the chat streams to its max_tokens, never ends early
    inputs = [[5 + (i * 31 + j) % 150 for j in range(args.tokens)] for i in range(args.inputs)]
    prompt = eng.prepare([{"role": "user", "content": "Tell me a long story."}])
    eng.embed(inputs[:8]).result(600)  # warm: the encoder's kernels, the slice rate
    queue = eng.lanes["cpu"].embeds
    sliced_pace, sliced_run = queue.pace, queue.run_slice
    rows = {"no embedding": [], "sliced": [], "one go (before)": []}
    for r in range(args.rounds):
        rows["no embedding"].append(stream_gaps(eng, prompt, None))
        for kind in (("sliced", "one go (before)") if r % 2 == 0
                     else ("one go (before)", "sliced")):
            if kind == "sliced":
                queue.pace, queue.run_slice = sliced_pace, sliced_run
            else:
                one_go(queue)
            rows[kind].append(stream_gaps(eng, prompt, inputs))
        queue.pace, queue.run_slice = sliced_pace, sliced_run
    eng.close()
    report = {"date": time.strftime("%Y-%m-%d"), "machine": platform.platform(),
              "inputs": args.inputs, "tokens_each": min(args.tokens, 510),
              "chat_step_ms": args.step_ms,
              "encoder": f"{args.layers} layers x {args.hidden}"}
    for kind, got in rows.items():
        report[kind] = {"max_gap_s": round(max(g for g, _, _ in got), 3),
                        "embedding_s": round(statistics.median(s for _, s, _ in got), 2),
                        "slices": got[0][2]}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
