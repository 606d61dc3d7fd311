"""Does heavy request work stall the local server? /health latency while six
~4 MB chat bodies are parsed, rendered and tokenized.

Run: .venv/bin/python benchmarks/server_health_latency.py [--bodies 6] [--mib 3.9]
         [--rounds 2] [--model default]

The same engine serves twice, alternated round by round: with the worker
pool (`ServerConfig(workers=2)`, as shipped) and with that work on the event
loop (`workers=0`, as before). Each round sends the bodies at once (each a
single user message of ~`--mib` MiB of words, far over the context, so each
is tokenized and then refused with 413) while /health is polled every 20 ms;
reported: /health latency p50 / p99 / max, per mode, and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import engine  # noqa: E402,F401  (OpenBLAS before MLX)
import httpx  # noqa: E402
import uvicorn  # noqa: E402

from engine import Engine, LaneSpec  # noqa: E402
from server.api import ServerConfig, make_app  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(eng, workers: int):
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(make_app(eng, ServerConfig(workers=workers)),
                                           host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    return server, thread, f"http://127.0.0.1:{port}"


def one_round(url: str, bodies: int, mib: float) -> dict:
    words = ("the quick brown fox jumps over the lazy dog " * int(mib * (1 << 20) / 44 + 1))
    body = json.dumps({"messages": [{"role": "user", "content": words}], "max_tokens": 4})
    statuses, latencies = [], []
    done = threading.Event()

    def send():
        r = httpx.post(url + "/v1/chat/completions", content=body, timeout=300,
                       headers={"content-type": "application/json"})
        statuses.append(r.status_code)

    senders = [threading.Thread(target=send) for _ in range(bodies)]
    for t in senders:
        t.start()

    def poll():
        with httpx.Client(timeout=60) as client:
            while not done.is_set():
                t = time.perf_counter()
                client.get(url + "/health")
                latencies.append(time.perf_counter() - t)
                done.wait(0.02)

    poller = threading.Thread(target=poll)
    poller.start()
    for t in senders:
        t.join()
    done.set()
    poller.join()
    latencies.sort()
    return {"statuses": sorted(statuses), "health_polls": len(latencies),
            "p50_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
            "max_ms": 1000 * latencies[-1]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="default")
    parser.add_argument("--bodies", type=int, default=6)
    parser.add_argument("--mib", type=float, default=3.9)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    eng = Engine.load(args.model, lanes=[LaneSpec("cpu", "cpu")])
    rows = {"pool": [], "event-loop": []}
    try:
        for _ in range(args.rounds):
            for mode, workers in (("pool", 2), ("event-loop", 0)):
                server, thread, url = serve(eng, workers)
                try:
                    rows[mode].append(one_round(url, args.bodies, args.mib))
                finally:
                    server.should_exit = True
                    thread.join(10)
    finally:
        eng.close()
    summary = {mode: {k: statistics.median(r[k] for r in runs)
                      for k in ("p50_ms", "p99_ms", "max_ms")} for mode, runs in rows.items()}
    print(json.dumps({
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d"), "args": vars(args), "rounds": rows,
        "median": summary,
        "max_ratio_pool_vs_event_loop": summary["pool"]["max_ms"] / summary["event-loop"]["max_ms"],
    }, indent=2))


if __name__ == "__main__":
    main()
