"""`tandem serve` vs `mlx_lm.server` on the same model and the same multi-turn load.

Run: .venv/bin/python benchmarks/server_vs_mlxlm.py [--clients 1 4 16] [--turns 3]
         [--layers 4] [--max-tokens 48] [--think 0.5] [--responses]

--responses adds a third run per N: the same load on `tandem serve` through
/v1/responses (the history sent as input items each turn, as Codex does),
beside its chat completions run (mlx_lm.server has no Responses API).

The model: a random 4-bit model with Qwen2.5-0.5B's shapes (`--layers` of
them; benchmarks/hybrid_real.py builds it), in Hugging Face layout so both
servers load the same files. Each client holds a chat: a shared system prompt,
then `--turns` user turns with think time between them, each answer streamed
(greedy, `--max-tokens`), the answer kept in the history. Both servers run as
subprocesses with the system OpenBLAS loaded first (mlx_lm.server through a
wrapper that imports `engine` before it), alternated N by N in one sitting,
each warmed up with one short request first (mlx_lm.server loads the model on
its first request).
Reported per server and N: output tokens/s over the wall time, TTFT p50/p95,
mean completion time, and the prompt tokens the server reports as cached.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SYSTEM = ("You are a helpful assistant in a desktop chat app. Answer briefly and "
          "precisely, in plain words, and say when you are not sure. ") * 6
QUESTIONS = ["How do plants make food?", "Why is the sky blue?", "What is a lighthouse for?",
             "Explain how a bicycle stays up.", "What makes bread rise?",
             "How do tides work?", "Why do cats purr?", "What is a prime number?"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(kind: str, model: Path, port: int) -> subprocess.Popen:
    if kind == "tandem":
        cmd = [sys.executable, "-m", "app", "serve", "--model", str(model), "--port", str(port)]
    else:  # the same OpenBLAS for both: import engine (which loads it) before mlx
        code = ("import sys, runpy, engine; sys.argv = ['mlx_lm.server', '--model', "
                f"{str(model)!r}, '--port', '{port}']; "
                "runpy.run_module('mlx_lm.server', run_name='__main__')")
        cmd = [sys.executable, "-c", code]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    import httpx

    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{kind} server exited: {proc.stderr.read()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"{kind} server did not start")


def _chat_turn(api, model_id, history, max_tokens):
    first, text, usage = None, "", None
    for chunk in api.chat.completions.create(
            model=model_id, messages=history, max_tokens=max_tokens, temperature=0,
            stream=True, stream_options={"include_usage": True}):
        if chunk.choices and chunk.choices[0].delta.content:
            first = first or time.perf_counter()
            text += chunk.choices[0].delta.content
        if getattr(chunk, "usage", None):
            usage = chunk.usage
    cached = 0
    if usage is not None:
        details = getattr(usage, "prompt_tokens_details", None)
        cached = (getattr(details, "cached_tokens", 0) or 0) if details else 0
    return first, text, (usage.completion_tokens if usage else 0), cached


def _responses_turn(api, model_id, history, max_tokens):
    first, text, usage = None, "", None
    for event in api.responses.create(model=model_id, input=history, temperature=0,
                                      max_output_tokens=max_tokens, stream=True):
        if event.type == "response.output_text.delta":
            first = first or time.perf_counter()
            text += event.delta
        elif event.type in ("response.completed", "response.incomplete"):
            usage = event.response.usage
    if usage is None:
        return first, text, 0, 0
    return (first, text, usage.output_tokens,
            usage.input_tokens_details.cached_tokens if usage.input_tokens_details else 0)


def run_load(port: int, model_id: str, clients: int, turns: int, max_tokens: int,
             think: float, dialect: str = "chat") -> dict:
    import openai

    ttfts, completions, tokens, cached = [], [], [0], [0]
    lock = threading.Lock()

    def client(i: int) -> None:
        api = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x",
                            max_retries=0, timeout=600)
        history = [{"role": "system", "content": SYSTEM}]
        for turn in range(turns):
            history.append({"role": "user", "content": QUESTIONS[(i + turn) % len(QUESTIONS)]})
            started = time.perf_counter()
            turn_of = _responses_turn if dialect == "responses" else _chat_turn
            first, text, out, hit = turn_of(api, model_id, history, max_tokens)
            end = time.perf_counter()
            history.append({"role": "assistant", "content": text})
            with lock:
                if first is not None:
                    ttfts.append(first - started)
                completions.append(end - started)
                tokens[0] += out
                cached[0] += hit
            time.sleep(think)

    wall = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - wall
    ttfts.sort()
    pick = lambda q: ttfts[min(len(ttfts) - 1, int(q * (len(ttfts) - 1)))]  # noqa: E731
    return {"tok_s": tokens[0] / wall, "ttft_p50": pick(0.5), "ttft_p95": pick(0.95),
            "completion_s": statistics.fmean(completions), "cached": cached[0],
            "tokens": tokens[0], "wall_s": wall}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--think", type=float, default=0.5)
    parser.add_argument("--responses", action="store_true",
                        help="also the same load through tandem's /v1/responses")
    args = parser.parse_args()
    from benchmarks.hybrid_real import QWEN_0_5B, synthetic_model

    model = synthetic_model(ROOT / "build" / "bench-models", QWEN_0_5B, args.layers)
    print("| N | server | output tok/s | TTFT p50 s | TTFT p95 s | mean completion s | "
          "cached prompt tokens | tokens | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = {}
    for n in args.clients:
        for kind in ("tandem", "mlx_lm") + (("tandem-responses",) if args.responses else ()):
            port = free_port()
            proc = start("tandem" if kind == "tandem-responses" else kind, model, port)
            try:
                # mlx_lm.server names a model by its path; tandem serve by its folder name.
                model_id = str(model) if kind == "mlx_lm" else model.name
                dialect = "responses" if kind == "tandem-responses" else "chat"
                # One request first: mlx_lm.server loads the model on the first request.
                run_load(port, model_id, 1, 1, 2, 0.0, dialect)
                r = run_load(port, model_id, n, args.turns, args.max_tokens, args.think,
                             dialect)
            finally:
                proc.terminate()
                proc.communicate(timeout=30)
            rows[(n, kind)] = r
            print(f"| {n} | {kind} | {r['tok_s']:.1f} | {r['ttft_p50']:.2f} | "
                  f"{r['ttft_p95']:.2f} | {r['completion_s']:.2f} | {r['cached']} | "
                  f"{r['tokens']} | {r['wall_s']:.1f} |", flush=True)
    print()
    for n in args.clients:
        t, m = rows[(n, "tandem")], rows[(n, "mlx_lm")]
        print(f"N={n}: throughput {t['tok_s'] / m['tok_s']:.2f}x, TTFT p95 "
              f"{t['ttft_p95'] / m['ttft_p95']:.2f}x (tandem / mlx_lm.server)")
        if (n, "tandem-responses") in rows:
            r = rows[(n, "tandem-responses")]
            print(f"N={n}: /v1/responses throughput {r['tok_s'] / t['tok_s']:.2f}x, TTFT p95 "
                  f"{r['ttft_p95'] / t['ttft_p95']:.2f}x of tandem's chat completions")
    print(json.dumps({f"{n}-{k}": v for (n, k), v in rows.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
