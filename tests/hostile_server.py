"""A hostile OpenAI-compatible server for tests of the remote lane: a real
HTTP server on 127.0.0.1 (http.server, a thread per connection) that lists
`models` and answers completions as a test scripts it.

`server.answer(body, authorization)` returns (status, parts): parts is an
iterable of bytes sent as they come (an endless generator is a server that
never ends), or for a status other than 200 the error body. None (the
default) is a short good answer, which the lane's probe gets. A client that
leaves ends an endless answer (the write fails).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def event(body: dict, text: str = "", finish: str | None = None) -> bytes:
    """One chunk in the format the request asked for (chat or completion)."""
    choice = ({"delta": {"content": text}} if "messages" in body else {"text": text})
    return b"data: " + json.dumps({"choices": [{**choice, "finish_reason": finish}]}).encode() \
        + b"\n\n"


def usage_event(prompt: int, completion: int, cached: int | None = None) -> bytes:
    usage: dict = {"prompt_tokens": prompt, "completion_tokens": completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def good_answer(body: dict, texts=("Hello", " there", "!")) -> list[bytes]:
    return ([event(body, t) for t in texts] + [event(body, "", "stop"),
                                               usage_event(5, len(texts)), DONE])


class HostileServer:
    def __init__(self, models=("scripted",)):
        self.models = list(models)
        self.answer = None
        self.requests = 0  # completion requests seen (the probe's too)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                data = json.dumps({"data": [{"id": m} for m in server.models]}).encode()
                self._send(200, "application/json", [data])

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests += 1
                answer = server.answer or (lambda b, auth: (200, good_answer(b)))
                status, parts = answer(body, self.headers.get("Authorization", ""))
                if status != 200:
                    self._send(status, "application/json", [parts])
                else:
                    self._send(200, "text/event-stream", parts)

            def _send(self, status, kind, parts):
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Connection", "close")
                self.end_headers()  # HTTP/1.0: the body runs to the close
                try:
                    for part in parts:
                        self.wfile.write(part)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client left

        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self._server.server_address[1]
        # (polled every 50 ms: shutdown() waits for a poll, 0.5 s by default)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        kwargs={"poll_interval": 0.05})

    def start(self) -> "HostileServer":
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
