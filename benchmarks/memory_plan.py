"""Memory of one- and two-lane engines on the default model, and the memory
plan's prediction of the weights' bytes against what MLX measures.

Run: .venv/bin/python benchmarks/memory_plan.py

Each configuration runs in its own process (MLX's counters start at zero):
load the engine, read MLX's active and peak memory, answer four chats at
once, read them again. "weights, measured" is active memory after load with
nothing running (no KV, empty prefix cache); "weights, planned" is the plan's
shared weights plus every lane's own copy.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {
    "1 lane, auto (float32 in place)": "[LaneSpec('cpu', 'cpu')]",
    "1 lane, quantized": "[LaneSpec('cpu', 'cpu', 'quantized')]",
    "2 lanes, auto (one shared float32)": "[LaneSpec('gpu', 'cpu', acts_as='gpu'), LaneSpec('cpu', 'cpu')]",
    "2 lanes, quantized shared": ("[LaneSpec('gpu', 'cpu', 'quantized', acts_as='gpu'), "
                                  "LaneSpec('cpu', 'cpu', 'quantized')]"),
    "2 lanes, quantized + float32 copy": ("[LaneSpec('gpu', 'cpu', 'quantized', acts_as='gpu'), "
                                          "LaneSpec('cpu', 'cpu', 'float32')]"),
}

CHILD = """
import json, sys
sys.path.insert(0, {root!r})
import engine
import mlx.core as mx
from engine import Engine, LaneSpec, SamplingParams
base = mx.get_active_memory()
e = Engine.load("default", lanes={lanes})
loaded = mx.get_active_memory() - base
load_peak = mx.get_peak_memory() - base
plan = e.memory_plan
planned = plan.shared_weight_bytes + sum(l.weight_bytes for l in plan.lanes if l.enabled)
mx.reset_peak_memory()
handles = [e.submit([{{"role": "user", "content": q}}], SamplingParams(max_tokens=64))
           for q in ("Why is the sky blue?", "Name three rivers.", "What is 2+2?", "Hello!")]
for h in handles:
    h.result(300)
after = mx.get_active_memory() - base
print(json.dumps({{"loaded": loaded, "load_peak": load_peak, "planned": planned,
                  "run_peak": mx.get_peak_memory() - base, "after": after,
                  "prefix": e.prefix_cache.nbytes,
                  "formats": {{l.name: l.weight_format for l in plan.lanes}}}}))
e.close()
"""


def mib(n: float) -> str:
    return f"{n / 2**20:.1f}"


def main() -> None:
    print("| configuration | lanes' formats | weights planned MiB | weights measured MiB "
          "| planned / measured | load peak MiB | peak while answering MiB "
          "| steady after (minus prefix cache) MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for name, lanes in CONFIGS.items():
        done = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), lanes=lanes)],
                              capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            print(f"| {name} | failed: {done.stderr.strip().splitlines()[-1]} |")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        formats = ", ".join(f"{k} {v}" for k, v in r["formats"].items())
        print(f"| {name} | {formats} | {mib(r['planned'])} | {mib(r['loaded'])} "
              f"| {r['planned'] / r['loaded']:.3f} | {mib(r['load_peak'])} | {mib(r['run_peak'])} "
              f"| {mib(r['after'] - r['prefix'])} |")


if __name__ == "__main__":
    main()
