"""A two-lane engine's start-up timeline, and GPU / CPU greedy agreement.

Run: python benchmarks/gpu/startup.py --model PATH [--stand-in]

In a fresh process (so MLX's CUDA build compiles its kernels inside this
run, as a user's first start does): build an engine with a GPU and a CPU
lane, submit one chat request at once, and record every 0.1 s what each
lane is doing (starting, warming up, calibrating, serving, failed) until both
serve; then when `Engine(...)` returned, each lane's warm-up seconds, when
each lane became ready, the first request's TTFT and lane, and the first
answer after the GPU lane is ready (issue 20's target: within 5 s of the GPU
lane's own warm-up). Then greedy agreement: the same prompt pinned to each
lane, the first tokens compared. JSON on stdout. `--stand-in` runs a CPU lane
as the GPU (this machine has none): it checks the script only.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import engine  # noqa: E402,F401,I001  (first: OpenBLAS before MLX)
from benchmarks.hybrid_real import PinnedPolicy  # noqa: E402
from engine import Engine, LaneSpec, SamplingParams  # noqa: E402
from engine.models.loader import load_model  # noqa: E402

QUESTION = [{"role": "user", "content": "Name three rivers in Europe and say one thing "
                                        "about each."}]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--stand-in", action="store_true")
    parser.add_argument("--limit-s", type=float, default=240.0)
    parser.add_argument("--agree-tokens", type=int, default=16)
    parser.add_argument("--lanes-wait-s", type=float, default=120.0,
                        help="how long to wait for every lane to serve before going on")
    args = parser.parse_args()

    t0 = time.perf_counter()
    loaded = load_model(args.model)
    load_s = time.perf_counter() - t0
    gpu = (LaneSpec("gpu", "cpu", "float32", acts_as="gpu") if args.stand_in
           else LaneSpec("gpu", "gpu"))
    t0 = time.perf_counter()
    eng = Engine(loaded, lanes=[gpu, LaneSpec("cpu", "cpu")])
    returned_s = time.perf_counter() - t0
    timeline, ready_at = [], {}
    stop = threading.Event()

    def watch():
        last = None
        while not stop.wait(0.1):
            now = round(time.perf_counter() - t0, 2)
            phases = {info.name: info.phase for info in eng.lane_info()}
            for name, lane in eng.lanes.items():
                if name not in ready_at and lane.ready.is_set():
                    ready_at[name] = now
            if phases != last:
                timeline.append((now, phases))
                print(f"startup: {now:7.2f} s {phases}", file=sys.stderr, flush=True)
                last = phases

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    print(f"startup: plan {eng.memory_plan.describe()}", file=sys.stderr, flush=True)
    first = eng.submit(QUESTION, SamplingParams(max_tokens=16))
    done = first.result(args.limit_s)
    print(f"startup: first answer ttft {done.ttft_s:.2f} s on {done.lanes}", file=sys.stderr,
          flush=True)
    every = eng.wait_ready(args.lanes_wait_s, every_lane=True)
    gpu_ready = ready_at.get("gpu", time.perf_counter() - t0)
    # The first answer started after the GPU lane is ready (on either lane).
    t_after = time.perf_counter()
    after = eng.generate(QUESTION, SamplingParams(max_tokens=16), timeout=args.limit_s)
    after_ttft = after.ttft_s
    stop.set()
    watcher.join()
    result = {
        "stand_in": args.stand_in, "model": args.model, "load_s": load_s,
        "engine_returned_s": returned_s,
        "warm_up_s": {n: lane.warm_up_seconds for n, lane in eng.lanes.items()},
        "ready_at_s": ready_at, "failed": {n: lane.failed for n, lane in eng.lanes.items()},
        "first_request": {"ttft_s": done.ttft_s, "lanes": done.lanes, "reason": done.reason,
                          "submitted_at_s": 0.0},
        "first_after_gpu_ready": {"ttft_s": after_ttft, "lanes": after.lanes,
                                  "started_after_gpu_ready_s":
                                      (t_after - t0) - gpu_ready},
        "timeline": timeline,
        "lanes": eng.describe_lanes(),
    }
    result["every_lane_ready"] = every
    print(json.dumps(result, default=str), file=sys.stderr, flush=True)
    # Greedy agreement on the first tokens: each lane alone, same prompt.
    outputs = {}
    for lane in ("gpu", "cpu") if every else ():
        eng.policy = PinnedPolicy(lane)
        eng.prefix_cache.clear()
        handle = eng.submit(QUESTION, SamplingParams(max_tokens=args.agree_tokens))
        handle.result(args.limit_s)
        outputs[lane] = handle.request.output_ids
    same = 0
    for a, b in zip(outputs.get("gpu", []), outputs.get("cpu", [])):
        if a != b:
            break
        same += 1
    result["greedy_agreement"] = {"tokens": args.agree_tokens, "equal_prefix": same,
                                  "gpu": outputs.get("gpu"), "cpu": outputs.get("cpu")}
    eng.close()
    print(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
