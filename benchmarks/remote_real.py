"""Real lanes: this machine alone vs this machine + a remote lane, on the
multi-tab chat workload.

Run: .venv/bin/python benchmarks/remote_real.py [--model default] [--tabs 6]

The remote is a second `tandem serve` process on 127.0.0.1 serving the same
model, reached over HTTP like any OpenAI-compatible server. Both processes
share this machine's cores, so any gain comes from routing around a busy
lane (two batches instead of one queue), not from more hardware; on a real
second machine the remote would bring its own. Modes alternate for
--repeats rounds on fresh engines (the remote process stays up); ratios are
local+remote / local-only within a round.
"""

from __future__ import annotations

import argparse
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.chat_tabs import play  # noqa: E402
from engine import Engine, RemoteSpec, Routed  # noqa: E402
from engine.sim import chat_workload  # noqa: E402


def start_server(model: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--model", model,
                             "--port", "0"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        if (match := re.search(r"at (http://\S+/v1)", line)):
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, match.group(1)
    raise SystemExit("tandem serve did not start")


def run(model: str, tabs, max_answer: int, remote_url: str | None) -> dict:
    remotes = [RemoteSpec(remote_url)] if remote_url else None
    engine = Engine.load(model, remotes=remotes)
    routed = []
    engine.subscribe(lambda e: routed.append(e) if isinstance(e, Routed) else None)
    if remote_url:
        lane = engine.remotes.lanes["remote"]
        deadline = time.monotonic() + 120
        while (lane.warming_up or engine.lanes["cpu"].cost is None) and \
                time.monotonic() < deadline:
            time.sleep(0.1)
    try:
        finished, wall = play(engine, tabs, max_answer)
    finally:
        engine.close()
    out = sum(f.output_tokens for f in finished)
    ttft = sorted(f.ttft_s for f in finished if f.ttft_s is not None)
    on_remote = sum(1 for f in finished if f.lanes and f.lanes[0][1] == "remote")
    return {"throughput": out / wall, "wall": wall, "answers": len(finished),
            "completion": statistics.fmean(f.e2e_s for f in finished),
            "ttft_p50": ttft[len(ttft) // 2], "ttft_p95": ttft[int(0.95 * (len(ttft) - 1))],
            "on_remote": on_remote, "errors": sum(f.reason == "error" for f in finished)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="default")
    parser.add_argument("--tabs", type=int, default=6)
    parser.add_argument("--think-scale", type=float, default=0.25)
    parser.add_argument("--max-answer", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    tabs = chat_workload(args.tabs, seed=0)
    tabs = [type(t)(t.tab_id, t.start_s * args.think_scale,
                    tuple(type(u)(u.user_tokens, u.answer_tokens, u.think_s * args.think_scale)
                          for u in t.turns)) for t in tabs]
    proc, url = start_server(args.model)
    print(f"# {platform.machine()} {platform.system()}, {args.tabs} tabs, model {args.model}, "
          f"remote {url} (same machine)")
    ratios = []
    try:
        for k in range(args.repeats):
            alone = run(args.model, tabs, args.max_answer, None)
            both = run(args.model, tabs, args.max_answer, url)
            ratios.append(both["throughput"] / alone["throughput"])
            for name, r in (("local only", alone), ("local + remote", both)):
                print(f"round {k}: {name:15s} {r['throughput']:6.1f} tok/s, wall "
                      f"{r['wall']:.1f} s, completion mean {r['completion']:.2f} s, TTFT p50 "
                      f"{r['ttft_p50']:.2f} / p95 {r['ttft_p95']:.2f} s, {r['on_remote']}/"
                      f"{r['answers']} on the remote, {r['errors']} errors")
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"throughput ratio local+remote / local-only per round: "
          f"{', '.join(f'{r:.2f}x' for r in ratios)}; mean {statistics.fmean(ratios):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
