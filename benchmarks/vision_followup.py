"""A chat's next turn after an image (issue 37): time to first token when the
turn's cached prefix already holds the image. Tandem embeds the new text
alone (no vision tower); the baseline is the same engine made to run the
tower again for every turn (`engine.models.vision._past_images` forced
false: what every turn did before 2026-12-06). Measured, alternated, same
run, same engine and prefix cache: only the tower differs.

Run: .venv/bin/python benchmarks/vision_followup.py [--depth 8] [--width 512]
     [--side 448] [--hidden 512] [--layers 4] [--rounds 5]

The model: a random Qwen2.5-VL (tests/vision_models.py) whose vision tower
is `--depth` blocks x `--width` (a real 7B's: 32 x 1280) and whose
processor reads up to `--side` x `--side` pixels; the image is a noisy
`--side` square photo-like picture.
"""

from __future__ import annotations

import argparse
import io
import platform
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: E402,I001  (first: it loads the system OpenBLAS before MLX)
from PIL import Image  # noqa: E402

from engine import Engine, LaneSpec, SamplingParams, decode_image, load_model  # noqa: E402
from engine.models import vision  # noqa: E402
from tests.vision_models import build_qwen25_vl  # noqa: E402


def photo(side: int):
    rng = random.Random(0)
    image = Image.new("RGB", (side, side))
    image.putdata([(rng.randrange(256), rng.randrange(256), rng.randrange(256))
                   for _ in range(side * side)])
    out = io.BytesIO()
    image.save(out, "PNG")
    return decode_image(out.getvalue())


def turn(eng, chat: list[dict]) -> tuple[float, str, int]:
    done = eng.submit(eng.prepare(chat), SamplingParams(max_tokens=8, temperature=0.0)) \
        .result(600)
    return done.ttft_s or 0.0, done.text, done.cached_tokens


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--side", type=int, default=448)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = build_qwen25_vl(Path(folder) / "qwen", hidden=args.hidden, layers=args.layers,
                               max_pixels=args.side * args.side,
                               vision=(args.depth, args.width))
        eng = Engine(load_model(str(path)), lanes=[LaneSpec("cpu", "cpu", "float32")])
        assert eng.wait_ready(300)
        image = photo(args.side)
        first = [{"role": "user", "content": "Describe it.", "images": [image],
                  "parts": [{"type": "image", "index": 0},
                            {"type": "text", "text": "Describe it."}]}]
        cold_ttft, answer, _ = turn(eng, first)
        chat = first + [{"role": "assistant", "content": answer}]
        image_tokens = eng.prepare(first).vision.model_ids.count(
            eng.model_info.model.processor.image_token_id)
        rows: dict[str, list[float]] = {"skip": [], "tower": []}
        original = vision._past_images
        for r in range(args.rounds):
            for side in (("skip", "tower") if r % 2 == 0 else ("tower", "skip")):
                # a new question each time: only the image turn is cached
                follow = chat + [{"role": "user", "content": f"And detail {side} {r}?"}]
                vision._past_images = original if side == "skip" else (lambda v, s: False)
                try:
                    ttft, _, cached = turn(eng, follow)
                finally:
                    vision._past_images = original
                assert cached > 0
                rows[side].append(ttft)
        eng.close()
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"machine: {platform.machine()} {platform.system()}, MLX CPU; Qwen2.5-VL random: "
          f"tower {args.depth} x {args.width}, text {args.layers} x {args.hidden}; a "
          f"{args.side}x{args.side} image = {image_tokens} image tokens; first turn TTFT "
          f"{cold_ttft:.3f} s; {args.rounds} rounds alternated")
    print("| next turn | TTFT s (median) |\n|---|---|")
    print(f"| image in the cache, no tower (Tandem) | {med['skip']:.3f} |")
    print(f"| tower run again (before) | {med['tower']:.3f} |")
    print(f"| ratio (before / now) | {med['tower'] / med['skip']:.1f}x |")
    print("per round:", {k: [round(x, 3) for x in v] for k, v in rows.items()})


if __name__ == "__main__":
    main()
