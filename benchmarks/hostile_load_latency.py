"""Does a hostile client's worst slow down everyone else? A normal chat's
time to first token while issue 47's worst requests are sent at once.

Run: .venv/bin/python benchmarks/hostile_load_latency.py [--rounds 2] [--chats 8]

One in-process server (uvicorn on 127.0.0.1) on one CPU lane serves a tiny
Qwen2.5-VL (random weights, 4 x 256 text model: a chat answers in
milliseconds, so what is measured is the wait the attacks impose) and an
embedding model of all-MiniLM-L6-v2's shape (random weights), with image
URLs fetched from this machine's loopback (as --allow-image-urls does from
public hosts). The attacks, all started at once:
- #2: two 60 MB bodies of `[]` to /v1/chat/completions (the image allowance);
- #3: three /v1/embeddings requests of 2,048 inputs x 1,000 token ids, and
  three more abandoned by their clients after 1 s;
- #4: two chat requests each with a 7000x7000 progressive JPEG carrying
  6,000 extra empty scans (0.8 MB as a data: URL);
- #5: two chat requests whose image URL is a local host dripping a header
  byte every 2 s.
Then a normal streamed chat (8 tokens) is sent every 0.5 s, `--chats` times;
reported: its time to first token, idle (measured first, the baseline, same
server and engine) and under the attacks, and how each attack ended.
"""

from __future__ import annotations

import argparse
import http.server
import io
import json
import os
import platform
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import engine  # noqa: E402,F401,I001  (OpenBLAS before MLX)
import base64  # noqa: E402

import httpx  # noqa: E402
import uvicorn  # noqa: E402

from engine import Engine, LaneSpec, load_embedding_model, load_model  # noqa: E402
from server.api import ServerConfig, make_app  # noqa: E402
from server.image_urls import ImageFetcher  # noqa: E402
from tests.embedding_models import build_bert  # noqa: E402
from tests.vision_models import build_qwen25_vl  # noqa: E402

CHAT = "/v1/chat/completions"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(eng):
    port = free_port()
    config = ServerConfig(model_id="tiny", image_urls=ImageFetcher(
        allowed=lambda ip: ip.is_loopback))
    server = uvicorn.Server(uvicorn.Config(make_app(eng, config), host="127.0.0.1",
                                           port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    return server, thread, f"http://127.0.0.1:{port}"


def drip_host(stop: threading.Event) -> str:
    """A local host that answers a status line, then a header byte every 2 s."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            try:
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                self.wfile.flush()
                while not stop.wait(2.0):
                    self.wfile.write(b"x")
                    self.wfile.flush()
            except OSError:
                pass

    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    site.daemon_threads = True
    threading.Thread(target=site.serve_forever, daemon=True).start()
    stop_site = threading.Thread(target=lambda: (stop.wait(), site.shutdown()), daemon=True)
    stop_site.start()
    return f"http://127.0.0.1:{site.server_address[1]}/image.png"


def scanned_jpeg(size: int = 7000, scans: int = 6000) -> str:
    """A progressive JPEG with `scans` extra AC scans of no data (each walks
    every block of the component when decoded), as a data: URL."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (size, size), (120, 40, 200)).save(out, "JPEG", progressive=True)
    body = bytes([1, 1, 0x00, 1, 63, 0x00])
    empty = bytes([0xFF, 0xDA]) + struct.pack(">H", len(body) + 2) + body
    data = out.getvalue()[:-2] + empty * scans + b"\xff\xd9"
    return "data:image/jpeg;base64," + base64.b64encode(data).decode()


def attacks(url: str, drip_url: str, jpeg_url: str) -> list[tuple[str, object]]:
    """(name, a function sending one attack and returning how it ended)."""
    junk = b'{"messages": [' + b"[]," * (20 << 20) + b"[]]}"
    # single-digit ids, compact: 2,048 x 1,000 of them fit the 4 MiB a body may be
    ids = [[(i + j) % 9 + 1 for j in range(1000)] for i in range(2048)]
    embed = json.dumps({"model": "bert", "input": ids}, separators=(",", ":")).encode()

    def post(path, content, timeout=300.0):
        def send():
            start = time.perf_counter()
            try:
                r = httpx.post(url + path, content=content, timeout=timeout,
                               headers={"content-type": "application/json"})
                ended = str(r.status_code)
            except httpx.TimeoutException:
                ended = "abandoned"
            except httpx.TransportError as e:
                ended = type(e).__name__
            return f"{ended} after {time.perf_counter() - start:.1f} s"
        return send

    def chat_with_image(image_url):
        return json.dumps({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is it?"},
            {"type": "image_url", "image_url": {"url": image_url}}]}],
            "max_tokens": 8}).encode()

    return ([("#2 60 MB of []", post(CHAT, junk))] * 2
            + [("#3 embeddings 2048x1000", post("/v1/embeddings", embed))] * 3
            + [("#3 abandoned embeddings", post("/v1/embeddings", embed, 1.0))] * 3
            + [("#4 6,000-scan JPEG", post(CHAT, chat_with_image(jpeg_url)))] * 2
            + [("#5 dripping image host", post(CHAT, chat_with_image(drip_url)))] * 2)


def ttft(url: str) -> float:
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8,
            "stream": True}
    start = time.perf_counter()
    with httpx.stream("POST", url + CHAT, json=body, timeout=300) as r:
        for line in r.iter_lines():
            if line.startswith("data: {") and '"content"' in line:
                return time.perf_counter() - start
    raise RuntimeError("the chat streamed no token")


def attack_process(url: str, jpeg_url: str, started, results) -> None:
    """In a process of its own (the attackers' clients never share the
    server's interpreter lock): the drip host, then every attack at once."""
    stop = threading.Event()
    drip_url = drip_host(stop)
    ended: dict[str, list[str]] = {}
    threads = []
    for name, send in attacks(url, drip_url, jpeg_url):
        def run(name=name, send=send):
            result = send()
            ended.setdefault(name, []).append(result)
        threads.append(threading.Thread(target=run, daemon=True))
    for t in threads:
        t.start()
    started.set()
    for t in threads:
        t.join(120)
    stop.set()
    results.put(ended)


def one_round(url: str, chats: int, jpeg_url: str) -> dict:
    import multiprocessing

    idle = [ttft(url) for _ in range(chats)]
    spawn = multiprocessing.get_context("spawn")
    started, results = spawn.Event(), spawn.Queue()
    attacker = spawn.Process(target=attack_process, args=(url, jpeg_url, started, results))
    attacker.start()
    started.wait(120)
    time.sleep(0.5)  # the attacks under way
    loaded = []
    for _ in range(chats):
        loaded.append(ttft(url))
        time.sleep(0.5)
    ended = results.get(timeout=300)
    attacker.join(60)
    return {"idle_ttft_s": idle, "attacked_ttft_s": loaded, "attacks": ended}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--chats", type=int, default=8)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="hostile-load-"))
    chat = build_qwen25_vl(folder / "qwen25-vl", hidden=256, layers=4)
    bert = build_bert(folder / "bert", layers=6, hidden=384, heads=12, positions=512)
    eng = Engine(load_model(str(chat)), lanes=[LaneSpec("cpu", "cpu", "float32")],
                 embedding_model=load_embedding_model(str(bert)))
    assert eng.wait_ready(300)
    jpeg_url = scanned_jpeg()
    server, thread, url = serve(eng)  # the attackers run in a process of their own
    rounds = []
    try:
        for _ in range(args.rounds):
            rounds.append(one_round(url, args.chats, jpeg_url))
    finally:
        server.should_exit = True
        thread.join(10)
        eng.close()
    idle = [t for r in rounds for t in r["idle_ttft_s"]]
    loaded = [t for r in rounds for t in r["attacked_ttft_s"]]
    print(json.dumps({
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d"), "args": vars(args), "rounds": rounds,
        "idle_ttft_median_s": statistics.median(idle), "idle_ttft_max_s": max(idle),
        "attacked_ttft_median_s": statistics.median(loaded),
        "attacked_ttft_max_s": max(loaded),
        "ratio_attacked_vs_idle_median": statistics.median(loaded) / statistics.median(idle),
    }, indent=2))


if __name__ == "__main__":
    main()
