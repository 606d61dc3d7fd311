"""Chats resume warm after a restart (issue 33): time to the first token of
a chat's next message in a new engine, KV restored from the disk tier vs
recomputed. Measured, not simulated.

Run: .venv/bin/python benchmarks/kv_restore.py [--tokens 1000 3000] [--model default]
     [--lanes cpu gpu]   (each lane alone: restored and recomputed on it; default:
                          the engine's default lanes)

For each size: engine 1 (a disk tier in a fresh folder) answers the chat's
first turn (N prompt tokens) and closes, saving its KV; engine 2 on the same
folder (a restart) answers the next message; engine 3 without a disk tier
answers the same next message from nothing. Reported: TTFT restored and
recomputed and their ratio, tokens restored and the time reading them took,
bytes on disk per token, and whether the two answers are the same.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: E402,I001  (first: it loads the system OpenBLAS before MLX)
from engine import Engine, LaneSpec, SamplingParams  # noqa: E402

PARAGRAPH = ("The lighthouse stood on the northern cliff for two hundred years. Every night "
             "its keeper climbed the spiral stairs, trimmed the wick and wound the clockwork "
             "that turned the great lens, so that ships far out at sea could find their way "
             "home. ")


def chat_of(eng: Engine, tokens: int) -> list[dict]:
    """A first turn of about `tokens` prompt tokens."""
    per = len(eng.tokenizer.encode(PARAGRAPH, add_special_tokens=False))
    text = PARAGRAPH * max(1, tokens // per)
    return [{"role": "user", "content": f"{text}\nSummarise the story in one sentence."}]


def case(model: str, tokens: int, folder: Path, lane: str | None = None) -> dict:
    params = SamplingParams(max_tokens=16)
    lanes = {"lanes": [LaneSpec(lane, lane)]} if lane else {}
    first = Engine.load(model, kv_cache_dir=str(folder), **lanes)
    try:
        chat = chat_of(first, tokens)
        done = first.generate(chat, params, timeout=900)
        chat = chat + [{"role": "assistant", "content": done.text},
                       {"role": "user", "content": "And who was the keeper?"}]
        prompt_tokens = done.prompt_tokens
    finally:
        first.close()
    files = list(folder.rglob("*.kv"))
    on_disk = sum(p.stat().st_size for p in files)
    restored = Engine.load(model, kv_cache_dir=str(folder), **lanes)
    try:
        warm = restored.generate(chat, params, timeout=900)
    finally:
        restored.close()
    cold_engine = Engine.load(model, **lanes)
    try:
        cold = cold_engine.generate(chat, params, timeout=900)
    finally:
        cold_engine.close()
    return {"first_turn_prompt_tokens": prompt_tokens, "next_prompt_tokens": warm.prompt_tokens,
            "files": len(files), "bytes_on_disk": on_disk,
            "bytes_per_token": round(on_disk / max(prompt_tokens, 1)),
            "restored_tokens": warm.restored_tokens,
            "lanes": [lane for _, lane in warm.lanes],
            "restore_s": round(warm.restore_s or 0, 3),
            "ttft_restored_s": round(warm.ttft_s, 3), "ttft_recomputed_s": round(cold.ttft_s, 3),
            "recomputed_over_restored": round(cold.ttft_s / warm.ttft_s, 1),
            "same_answer": warm.text == cold.text}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="default")
    ap.add_argument("--tokens", type=int, nargs="+", default=[1000, 3000])
    ap.add_argument("--lanes", nargs="+", default=[None])
    args = ap.parse_args()
    report = {"machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores",
              "date": time.strftime("%Y-%m-%d"), "cases": {}}
    for lane in args.lanes:
        for n in args.tokens:
            key = f"{lane}:{n}" if lane else str(n)
            with tempfile.TemporaryDirectory(prefix="tandem-kv-") as folder:
                report["cases"][key] = case(args.model, n, Path(folder), lane)
            print(json.dumps({key: report["cases"][key]}), file=sys.stderr, flush=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
