"""Image requests (issue 37): Tandem's engine beside mlx-vlm on the same
vision model files. Measured, alternated, same run.

- One request: decode tokens/s (after the first token) and time to first
  token, Tandem (one CPU lane) vs mlx-vlm's `generate`.
- Four concurrent requests (four different images): total tokens/s over the
  wall time, Tandem (continuous batch) vs mlx-vlm's `batch_generate`.

Run: .venv/bin/python benchmarks/vision.py [--family smolvlm|qwen2_5_vl]
     [--hidden 256] [--layers 4] [--tokens 128] [--rounds 3]

The model: a random SmolVLM or Qwen2.5-VL (tests/vision_models.py) with
`--hidden` / `--layers` in its text model, a 2-layer vision tower; 64x48
images become 4 image tokens. Decode tokens/s are each side's own timing
of its decode (the engine's `Finished.tokens_per_s`, mlx-vlm's
`generation_tps`); four concurrent is wall time, submit to last token. Random weights stop at random: both sides get
the same prompts, and each figure counts the tokens each actually wrote.
"""

from __future__ import annotations

import argparse
import io
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: E402,I001  (first: it loads the system OpenBLAS before MLX)
from PIL import Image  # noqa: E402

from engine import Engine, LaneSpec, SamplingParams, decode_image, load_model  # noqa: E402
from tests.vision_models import build_qwen25_vl, build_smolvlm  # noqa: E402

COLORS = [(200, 30, 30), (20, 200, 30), (30, 30, 200), (200, 200, 30)]
TEXT = "What is in the picture?"


def picture(color):
    out = io.BytesIO()
    Image.new("RGB", (64, 48), color).save(out, "PNG")
    return decode_image(out.getvalue())


def messages(image) -> list[dict]:
    return [{"role": "user", "content": TEXT, "images": [image],
             "parts": [{"type": "image", "index": 0}, {"type": "text", "text": TEXT}]}]


def tandem_one(eng, image, tokens: int) -> tuple[float, float]:
    """(decode tokens/s after the first token, time to first token), as the
    engine timed them: from submit, the processor's work (prepare) apart, as
    mlx-vlm's own figures leave its processor out."""
    prepared = eng.prepare(messages(image))
    done = eng.submit(prepared, SamplingParams(max_tokens=tokens, temperature=0.0)).result(600)
    return done.tokens_per_s or 0.0, done.ttft_s or 0.0


def tandem_four(eng, images, tokens: int) -> float:
    started = time.perf_counter()
    handles = [eng.submit(eng.prepare(messages(i)), SamplingParams(max_tokens=tokens,
                                                                   temperature=0.0))
               for i in images]
    total = sum(h.result(600).output_tokens for h in handles)
    return total / (time.perf_counter() - started)


def vlm_one(vlm, processor, prompt, image, tokens: int) -> tuple[float, float]:
    from mlx_vlm import generate

    out = generate(vlm, processor, prompt, image=[image.pixels], max_tokens=tokens,
                   temperature=0.0, verbose=False)
    ttft = out.prompt_tokens / out.prompt_tps if out.prompt_tps else 0.0
    return out.generation_tps, ttft


BATCH_FAILED: list[str] = []  # why mlx-vlm's batch_generate could not run, if it could not


def vlm_four(vlm, processor, prompt, images, tokens: int) -> float:
    """mlx-vlm's batch_generate; where it cannot run this family (0.7.10 hands
    SmolVLM's processor the batch's images as one sample's), its generate
    four times in a row, and the table says so."""
    from mlx_vlm import batch_generate, generate

    started = time.perf_counter()
    if not BATCH_FAILED:
        try:  # batch_generate applies the chat template itself: it takes the user's text
            out = batch_generate(vlm, processor, images=[i.pixels for i in images],
                                 prompts=[TEXT] * len(images), max_tokens=tokens,
                                 verbose=False)  # its default sampler is greedy
            return out.stats.generation_tokens / (time.perf_counter() - started)
        except ValueError as e:
            BATCH_FAILED.append(str(e)[:160])
            started = time.perf_counter()
    total = sum(generate(vlm, processor, prompt, image=[i.pixels], max_tokens=tokens,
                         temperature=0.0, verbose=False).generation_tokens for i in images)
    return total / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--family", choices=["smolvlm", "qwen2_5_vl"], default="smolvlm")
    args = parser.parse_args()
    from mlx_vlm.utils import load

    with tempfile.TemporaryDirectory() as folder:
        build = build_smolvlm if args.family == "smolvlm" else build_qwen25_vl
        path = build(Path(folder) / args.family, hidden=args.hidden, layers=args.layers)
        eng = Engine(load_model(str(path)), lanes=[LaneSpec("cpu", "cpu", "float32")],
                     prefix_cache_bytes=0)
        assert eng.wait_ready(300)
        vlm, processor = load(str(path))
        prompt = processor.apply_chat_template(
            [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": TEXT}]}],
            add_generation_prompt=True, tokenize=False)
        images = [picture(c) for c in COLORS]
        tandem_one(eng, images[0], 8)  # warm both
        vlm_one(vlm, processor, prompt, images[0], 8)
        rows = {"t1": [], "v1": [], "tt": [], "vt": [], "t4": [], "v4": []}
        for r in range(args.rounds):
            image = images[r % len(images)]
            for side in (("t", "v") if r % 2 == 0 else ("v", "t")):
                if side == "t":
                    tps, ttft = tandem_one(eng, image, args.tokens)
                    rows["t1"].append(tps)
                    rows["tt"].append(ttft)
                    rows["t4"].append(tandem_four(eng, images, args.tokens))
                else:
                    tps, ttft = vlm_one(vlm, processor, prompt, image, args.tokens)
                    rows["v1"].append(tps)
                    rows["vt"].append(ttft)
                    rows["v4"].append(vlm_four(vlm, processor, prompt, images, args.tokens))
        eng.close()
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"machine: {platform.machine()} {platform.system()}, MLX CPU; {args.family} random, "
          f"text {args.layers} layers x {args.hidden}, {args.tokens} tokens, "
          f"{args.rounds} rounds alternated")
    print("| | Tandem | mlx-vlm | ratio |\n|---|---|---|---|")
    print(f"| one request, decode tok/s | {med['t1']:.1f} | {med['v1']:.1f} | "
          f"{med['t1'] / med['v1']:.2f}x |")
    print(f"| one request, TTFT s | {med['tt']:.3f} | {med['vt']:.3f} | |")
    how = "generate x4 in a row" if BATCH_FAILED else "batch_generate"
    print(f"| 4 concurrent, total tok/s | {med['t4']:.1f} | {med['v4']:.1f} ({how}) | "
          f"{med['t4'] / med['v4']:.2f}x |")
    if BATCH_FAILED:
        print("mlx-vlm batch_generate failed:", BATCH_FAILED[0])
    print("per round:", {k: [round(x, 2) for x in v] for k, v in rows.items()})


if __name__ == "__main__":
    main()
