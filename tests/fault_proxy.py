"""A fault-injecting HTTP/1.1 reverse proxy for tests of the remote lane.

Tests run a real OpenAI-compatible server (`tandem serve`) and put a
FaultProxy in front of it, then point the client at `proxy.url`. With
`proxy.set(mode, **options)` a test makes the next completion requests (paths
starting with /v1/completions or /v1/chat/completions) fail in a chosen way:

  pass                       forward, streaming the response as it arrives
  delay(seconds)             wait, then forward
  status(code, body, retry_after)   answer an OpenAI-style error, no upstream
  cut(after_events)          relay that many SSE events, then close
  garbage(after_events, payload)    relay that many events, send payload, close
  stall(after_events)        relay that many events, then hold the connection
                             silently until the client leaves or close()
  refuse                     close every connection without a response
                             (GET /v1/models too)

Every mode takes `times`: the fault hits that many completion requests, then
the proxy reverts to "pass". Other paths are always forwarded faithfully
(unless "refuse"). A mode applies to requests that start after set().

Each client connection carries one request; the proxy opens a new upstream
connection for it (`Connection: close`), de-chunks the upstream body and sends
it to the client close-delimited (no Content-Length, no chunking), so a cut is
just a close: at the SSE level the client sees events and then EOF, no [DONE].
An SSE event is a block ending in a blank line. If the upstream cannot be
reached the client connection is dropped too, as a dead server would do.
Standard library only: asyncio streams on a daemon thread.
"""

from __future__ import annotations

import asyncio
import http
import json
import re
import threading
from urllib.parse import urlsplit

MODES = ("pass", "delay", "status", "cut", "garbage", "stall", "refuse")
COMPLETION_PATHS = ("/v1/completions", "/v1/chat/completions")
_EVENT_END = re.compile(rb"\r?\n\r?\n")
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
        "trailer", "upgrade", "content-length", "host", "accept-encoding"}


class FaultProxy:
    def __init__(self, target: str):
        parts = urlsplit(target)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.url = ""
        self._cond = threading.Condition()
        self._mode, self._options, self._times = "pass", {}, None
        self._requests = self._served = 0
        self._loop = self._server = self._thread = None
        self._conns: dict[asyncio.Task, asyncio.StreamWriter] = {}   # open client connections

    # -- control (any thread) -------------------------------------------
    def set(self, mode: str = "pass", **options) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown fault mode {mode!r}")
        times = options.pop("times", None)
        with self._cond:
            self._mode, self._options, self._times = mode, options, times

    requests = property(lambda self: self._count("_requests"),
                        doc="Completion requests seen (refused and faulted ones too).")
    served = property(lambda self: self._count("_served"),
                      doc="Completion requests forwarded upstream.")

    def _count(self, name: str) -> int:
        with self._cond:
            return getattr(self, name)

    def wait_requests(self, n: int, timeout: float = 30.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._requests >= n, timeout)

    def start(self) -> "FaultProxy":
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(lambda loop, context: None)

        def run():
            loop = self._loop
            asyncio.set_event_loop(loop)
            self._server = loop.run_until_complete(
                asyncio.start_server(self._handle, "127.0.0.1", 0))
            self.url = "http://127.0.0.1:%d" % self._server.sockets[0].getsockname()[1]
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name="FaultProxy", daemon=True)
        self._thread.start()
        ready.wait()
        return self

    def close(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(10)
        except Exception:
            pass
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10)

    __enter__ = start

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the loop's side --------------------------------------------------
    async def _shutdown(self) -> None:
        self._server.close()
        conns = list(self._conns.items())
        for task, writer in conns:
            writer.transport.abort()
            task.cancel()
        await asyncio.gather(*(task for task, _ in conns), return_exceptions=True)

    def _take(self, completion: bool) -> tuple[str, dict]:
        """The mode for a request that starts now; counts completion requests."""
        with self._cond:
            mode, options = self._mode, dict(self._options)
            if not completion:
                return ("refuse" if mode == "refuse" else "pass"), {}
            self._requests += 1
            if self._times is not None:
                self._times -= 1
                if self._times < 0:          # times=0: the fault hits nothing
                    mode, options = "pass", {}
                if self._times <= 0:
                    self._mode, self._options, self._times = "pass", {}, None
            self._cond.notify_all()
            return mode, options

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self._conns[asyncio.current_task()] = writer
        upstream = None
        try:
            request = await _read_request(reader)
            if request is None:
                return
            method, target, headers, body = request
            completion = target.startswith(COMPLETION_PATHS)
            mode, opts = self._take(completion)
            if mode == "refuse":
                writer.transport.abort()
                return
            if mode == "status":
                writer.write(_error_response(opts.get("code", 500), opts.get("body"),
                                             opts.get("retry_after")))
                await writer.drain()
                return
            if mode == "delay":  # a slow peer is the fault under test, not a wait
                await asyncio.sleep(float(opts.get("seconds", 1.0)))
            try:
                up_reader, upstream = await asyncio.open_connection(self.host, self.port)
            except OSError:
                writer.transport.abort()
                return
            lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host}:{self.port}"]
            lines += [f"{k}: {v}" for k, v in headers if k.lower() not in _HOP]
            lines += [f"Content-Length: {len(body)}", "Accept-Encoding: identity",
                      "Connection: close", "", ""]
            upstream.write("\r\n".join(lines).encode("latin-1") + body)
            await upstream.drain()
            if completion:
                with self._cond:
                    self._served += 1
            await self._relay(up_reader, writer, mode, opts)
            if mode == "stall":
                upstream.close()
                upstream = None
                while await reader.read(65536):
                    pass
        except asyncio.CancelledError:   # close(): end quietly
            pass
        except Exception:
            writer.transport.abort()
        finally:
            self._conns.pop(asyncio.current_task(), None)
            if upstream is not None:
                upstream.transport.abort()
            writer.close()

    async def _relay(self, up_reader, writer, mode: str, opts: dict) -> None:
        status_line, headers, chunked, length = _parse_head(
            await up_reader.readuntil(b"\r\n\r\n"), None)
        out = [status_line] + [f"{k}: {v}" for k, v in headers if k.lower() not in _HOP]
        writer.write(("\r\n".join(out + ["Connection: close", "", ""])).encode("latin-1"))
        await writer.drain()

        limit = int(opts.get("after_events", 0)) if mode in ("cut", "garbage", "stall") else None
        buffer, events = b"", 0
        if limit is None or limit > 0:
            async for piece in _body(up_reader, chunked, length):
                if limit is None:
                    writer.write(piece)
                    await writer.drain()
                    continue
                buffer += piece
                start = 0
                while events < limit and (m := _EVENT_END.search(buffer, start)):
                    start, events = m.end(), events + 1
                writer.write(buffer[:start])
                buffer = buffer[start:]
                await writer.drain()
                if events >= limit:
                    break
            else:
                writer.write(buffer)   # upstream ended before the fault point
                await writer.drain()
                return
        if mode == "garbage":
            writer.write(opts.get("payload", b"data: {not json\n\n"))
            await writer.drain()


async def _read_request(reader):
    """(method, target, headers, body) of one request, None at a clean EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    request_line, headers, chunked, length = _parse_head(head, 0)
    method, target, _version = request_line.split(" ", 2)
    body = b"".join([piece async for piece in _body(reader, chunked, length)])
    return method, target, headers, body


def _parse_head(head: bytes, default_length: int | None):
    """(first line, headers, chunked, length) of a message head; a length of
    None means the body runs to EOF."""
    first, *lines = head.decode("latin-1").split("\r\n")
    headers = [tuple(x.strip() for x in line.split(":", 1)) for line in lines if ":" in line]
    names = {k.lower(): v.lower() for k, v in headers}
    chunked = "chunked" in names.get("transfer-encoding", "")
    length = names.get("content-length", default_length)
    return first, headers, chunked, None if chunked or length is None else int(length)


async def _body(reader, chunked: bool, length: int | None):
    """The payload of an HTTP/1.1 body, de-chunked, in pieces as they arrive."""
    if chunked:
        while True:
            line = await reader.readline()
            if not line.strip():
                return
            size = int(line.split(b";")[0].strip(), 16)
            if size == 0:
                while (await reader.readline()).strip():   # trailers
                    pass
                return
            while size > 0:
                data = await reader.read(min(size, 65536))
                if not data:
                    return
                size -= len(data)
                yield data
            await reader.readline()
    elif length is not None:
        while length > 0:
            data = await reader.read(min(length, 65536))
            if not data:
                return
            length -= len(data)
            yield data
    else:
        while data := await reader.read(65536):
            yield data


def _error_response(code: int, body: str | None, retry_after: int | None) -> bytes:
    reason = {s.value: s.phrase for s in http.HTTPStatus}.get(code, "Error")
    if body is None:
        kind = ("rate_limit_error" if code == 429 else
                "server_error" if code >= 500 else "invalid_request_error")
        body = json.dumps({"error": {"message": f"injected fault: HTTP {code} {reason}",
                                     "type": kind, "code": code}})
    data = body.encode() if isinstance(body, str) else body
    lines = [f"HTTP/1.1 {code} {reason}", "Content-Type: application/json",
             f"Content-Length: {len(data)}", "Connection: close"]
    if retry_after is not None:
        lines.append(f"Retry-After: {retry_after}")
    return ("\r\n".join(lines + ["", ""])).encode("latin-1") + data
