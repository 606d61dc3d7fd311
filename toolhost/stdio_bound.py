"""A stdio server's output read in bounded lines.

The SDK's stdio transport (mcp.client.stdio) reads a server's stdout into
one growing string until a newline: a 50 MB result costs seconds of copying
(each chunk re-joins the buffer) and all its memory before Tandem can cut
it. Here the server's stdout is wrapped before the SDK reads it: a line is
gathered in pieces and handed on whole (one join), and a line longer than
`MAX_LINE` bytes is dropped as it arrives; when it was a response, an error
response for its request id goes on in its place, so the call ends at once
with a clear error instead of waiting out its time limit.

`bounded_stdio_client(params, errlog)` is the SDK's `stdio_client` with its
process's stdout so wrapped: the SDK spawns through its
`_create_platform_compatible_process`, wrapped once here; the wrapper bounds
a process spawned in a task that opened a bounded client (a context
variable says so), and leaves any other spawn as it was. Such a process
also gets a parent-death signal, and its process group is ended after the
client closes (toolhost/process_tree.py)."""

from __future__ import annotations

import contextlib
import contextvars
import json
import re
import subprocess
import sys
import threading
from collections import deque

import anyio
from anyio.abc import ByteReceiveStream

from .process_tree import command_line, end_group

MAX_LINE = 8 << 20  # bytes of one JSON-RPC message from a stdio server
_HEAD, _TAIL = 512, 512
_ID_HEAD = re.compile(rb'^\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?\d+|"[^"\\]{0,200}")')
_ID_TAIL = re.compile(rb'"id"\s*:\s*(-?\d+|"[^"\\]{0,200}")\s*\}\s*$')


class BoundedLines(ByteReceiveStream):
    """`inner`'s bytes, a whole line at a time; over-long lines replaced."""

    def __init__(self, inner: ByteReceiveStream, limit: int = MAX_LINE):
        self._inner, self._limit = inner, limit
        self._pieces: list[bytes] = []
        self._size = 0
        self._head = b""  # the start of a line being dropped
        self._tail = b""
        self._dropping = False
        self._ready: deque[bytes] = deque()
        self.dropped = 0  # lines dropped, for the host's note

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while not self._ready:
            try:
                chunk = await self._inner.receive(max_bytes)
            except anyio.EndOfStream:
                if self._pieces and not self._dropping:  # a last line without its newline
                    self._ready.append(b"".join(self._pieces))
                    self._pieces, self._size = [], 0
                    break
                raise
            self._feed(chunk)
        return self._ready.popleft()

    def _feed(self, chunk: bytes) -> None:
        while chunk:
            end = chunk.find(b"\n")
            part, chunk = (chunk, b"") if end < 0 else (chunk[:end + 1], chunk[end + 1:])
            if self._dropping:
                self._tail = (self._tail + part)[-_TAIL:]
            else:
                self._pieces.append(part)
                self._size += len(part)
                if self._size > self._limit:
                    line = b"".join(self._pieces)
                    self._head, self._tail = line[:_HEAD], line[-_TAIL:]
                    self._pieces, self._size, self._dropping = [], 0, True
            if end >= 0:
                if self._dropping:
                    self._dropping = False
                    self.dropped += 1
                    error = _error_for(self._head, self._tail.rstrip(b"\r\n"), self._limit)
                    if error:
                        self._ready.append(error)
                else:
                    self._ready.append(b"".join(self._pieces))
                    self._pieces, self._size = [], 0

    async def aclose(self) -> None:
        await self._inner.aclose()


def _error_for(head: bytes, tail: bytes, limit: int) -> bytes | None:
    """An error response for the dropped line's request, if it was a response
    (a request or notification from the server is just dropped)."""
    if b'"method"' in head:
        return None
    found = _ID_HEAD.search(head) or _ID_TAIL.search(tail)
    if found is None:
        return None
    message = (f"The tool server sent a message of over {limit >> 20} MiB; Tandem did not "
               "read it.")
    return (b'{"jsonrpc": "2.0", "id": ' + found.group(1) + b', "error": '
            + json.dumps({"code": -32603, "message": message}).encode() + b"}\n")


_limit: contextvars.ContextVar[int | None] = contextvars.ContextVar("tandem_stdio_limit",
                                                                   default=None)
_spawned: contextvars.ContextVar[list] = contextvars.ContextVar("tandem_stdio_spawned")
_installed = threading.Lock()


def _install() -> None:
    """Wrap the SDK's spawn once, for good: a process spawned while
    `_limit` is set (in the task opening a bounded client) has its stdout
    bounded; any other spawn is the SDK's own."""
    from mcp.client import stdio

    with _installed:
        original = stdio._create_platform_compatible_process
        if getattr(original, "tandem_bounded", False):
            return

        async def spawn(command, args, env=None, errlog=sys.stderr, cwd=None):
            limit = _limit.get()
            if not limit or sys.platform == "win32":
                return await original(command=command, args=args, env=env, errlog=errlog,
                                      cwd=cwd)
            # As the SDK starts it (a new session: its own process group), with
            # a parent-death signal on Linux (toolhost/process_tree.py).
            process = await anyio.open_process(
                command_line(command, args, env), stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=errlog, cwd=cwd, env=env,
                start_new_session=True)
            _spawned.get().append(process)
            stdout = getattr(process, "_stdout", None)
            if stdout is not None:  # anyio's asyncio Process (POSIX)
                process._stdout = BoundedLines(stdout, limit)
            return process

        spawn.tandem_bounded = True
        stdio._create_platform_compatible_process = spawn


@contextlib.asynccontextmanager
async def bounded_stdio_client(params, errlog, limit: int = MAX_LINE):
    from mcp.client.stdio import stdio_client

    _install()
    token = _limit.set(limit)  # this task's context: the spawn below reads it
    spawned: list = []
    listed = _spawned.set(spawned)
    try:
        async with stdio_client(params, errlog=errlog) as streams:
            yield streams
    finally:
        with contextlib.suppress(ValueError):  # closed from another context: nothing to undo
            _limit.reset(token)
        with contextlib.suppress(ValueError):
            _spawned.reset(listed)
        # The SDK ended the server; what it left in its group ends now.
        with anyio.CancelScope(shield=True):
            for process in spawned:
                await end_group(process)
