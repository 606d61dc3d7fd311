"""One line per request for `tandem serve`'s console: method, path, status,
output tokens (for completions) or tokens embedded (for embeddings) and
time. Plain ASGI; the route puts the tokens in the request's state."""

from __future__ import annotations

import time
from typing import Callable


class AccessLog:
    def __init__(self, app, write: Callable[[str], None]):
        self.app, self.write = app, write

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), [0]

        async def watch(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            state = scope.get("state", {})
            tokens, embedded = state.get("output_tokens"), state.get("embedded_tokens")
            spent = (f" · {tokens} tokens" if tokens is not None
                     else f" · {embedded} tokens embedded" if embedded is not None else "")
            self.write(f"{scope['method']} {scope['path']} {status[0] or '-'}{spent} · "
                       f"{time.perf_counter() - started:.2f} s")
