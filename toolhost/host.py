"""The MCP host: a session per server on one asyncio loop thread, through
the official SDK (`mcp` 2.x): stdio servers started on first use (their
stderr kept in a log file the user can open, capped: toolhost/server_log.py)
and stopped on close, their process groups with them (process_tree.py);
Streamable HTTP servers with their headers on the SDK's httpx client.

Faults are notes, never exceptions for the caller: a server that does not
start, crashes, hangs (each call has a time limit), answers garbage or
lists hundreds of tools gives a note and, for a call, an error result the
model and the user see. A result is data, cut at `MAX_RESULT_CHARS` with a
note (the SDK reads stdio unbounded)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .config import ServerSpec
from .server_log import CAP as LOG_CAP
from .server_log import ServerLog

MAX_TOOLS = 128  # per server; more are left out, with a note
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")  # MCP's advice; others are left out
MAX_RESULT_CHARS = 32_000  # of a tool's result, for the model and the transcript
START_S = 30.0
CALL_S = 60.0
STOPPED = "stopped"  # a note's start: the server ran, then stopped (started again on use)


@dataclass(frozen=True)
class Tool:
    server: str
    name: str
    description: str
    schema: dict

    def as_function(self, name: str | None = None) -> dict:
        """The tool in the chat template's (OpenAI's) function shape, under
        `name` (the name the model is offered: toolhost/offer.py)."""
        return {"type": "function", "function": {
            "name": name or self.name, "description": self.description,
            "parameters": self.schema}}


@dataclass(frozen=True)
class ToolResult:
    text: str
    is_error: bool = False


class ToolHost:
    def __init__(self, specs: list[ServerSpec], log_dir: str | Path | None = None,
                 call_s: float = CALL_S, start_s: float = START_S, log_bytes: int = LOG_CAP):
        self.specs = {s.name: s for s in specs}
        self.log_dir = Path(log_dir) if log_dir else None
        self.log_bytes = log_bytes  # of a server's log file (one older copy beside it)
        self._logs: list[ServerLog] = []  # the logs being written
        self.call_s, self.start_s = call_s, start_s
        self.notes: dict[str, str] = {}  # server -> what went wrong, for people
        self._sessions: dict[str, object] = {}
        self._tools: dict[str, list[Tool]] = {}
        self._stops: dict[str, asyncio.Event] = {}
        self._tasks: dict[str, asyncio.Task] = {}
        self._starting: dict[str, asyncio.Future] = {}  # a start in progress, per server
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-host",
                                        daemon=True)
        self._thread.start()

    # ---- any thread ------------------------------------------------------------------
    def tools(self) -> list[Tool]:
        """Every server's tools, starting those not running yet (a server that
        cannot start gives a note and no tools)."""
        for name in self.specs:
            if name not in self._sessions and name not in self.notes:
                try:
                    self._run(self._start(self.specs[name]), self.start_s)
                except TimeoutError:  # it never answered `initialize`: stopped, said
                    self.notes[name] = f"did not start within {self.start_s:g} s"
                    task = self._tasks.get(name)
                    if task is not None:
                        self._loop.call_soon_threadsafe(task.cancel)
        return [tool for name in self.specs for tool in self._tools.get(name, ())]

    def log_path(self, server: str) -> Path | None:
        return self.log_dir / f"{server}.log" if self.log_dir else None

    def call(self, server: str, name: str, arguments: dict) -> ToolResult:
        """Run a call and wait for its result (an error result on any fault)."""
        future = self.start_call(server, name, arguments)
        try:
            return future.result(self.call_s + 5)
        except (TimeoutError, concurrent.futures.TimeoutError):
            future.cancel()
            return ToolResult(f"{name} did not answer within {self.call_s:g} s.", True)

    def start_call(self, server: str, name: str, arguments: dict) -> concurrent.futures.Future:
        """Start a call; the future gives its ToolResult (never an exception).
        Cancelling the future cancels the call (Stop)."""
        return asyncio.run_coroutine_threadsafe(self._call(server, name, arguments), self._loop)

    async def _call(self, server: str, name: str, arguments: dict) -> ToolResult:
        if server not in self._sessions and server in self.specs and \
                self.notes.get(server, "").startswith(STOPPED):
            # It ran, then stopped (crashed, closed its pipe): started again for this call.
            self.notes.pop(server, None)
            try:
                await asyncio.wait_for(self._start(self.specs[server]), self.start_s)
            except (asyncio.TimeoutError, TimeoutError):
                self.notes[server] = f"did not start within {self.start_s:g} s"
        session = self._sessions.get(server)
        if session is None:
            return ToolResult(f"The tool server {server} is not running"
                              + (f": {self.notes[server]}" if server in self.notes else "."),
                              True)
        try:
            result = await asyncio.wait_for(session.call_tool(name, arguments), self.call_s)
        except (asyncio.TimeoutError, TimeoutError):
            return ToolResult(f"{name} did not answer within {self.call_s:g} s.", True)
        except Exception as e:  # a crash, garbage, a closed pipe: an error the model sees
            if _closed(e):  # the session is dead: let it go (the next call starts it again)
                self._drop(server, f"{STOPPED}: {_said(e)}")
            return ToolResult(f"{name} failed: {type(e).__name__}: {e}", True)
        return _result(result)

    def _drop(self, server: str, note: str) -> None:
        self._sessions.pop(server, None)
        self.notes[server] = note
        stop = self._stops.get(server)
        if stop is not None:
            stop.set()  # its task closes the transport (a stdio server's process ends)

    def running(self, server: str) -> bool:
        return server in self._sessions

    def retry(self, server: str) -> None:
        """Forget why `server` stopped: the next `tools()` starts it again."""
        if server not in self._sessions:
            self.notes.pop(server, None)

    def set_specs(self, specs: list[ServerSpec]) -> None:
        """The servers now configured: a removed or changed one is stopped
        (a changed one starts again, as configured, on next use)."""
        new = {s.name: s for s in specs}
        for name, old in list(self.specs.items()):
            if new.get(name) != old:
                self.stop(name)
                self.notes.pop(name, None)
                self._tools.pop(name, None)
        self.specs = new

    def stop(self, server: str, wait: float = 10.0) -> None:
        """Stop a server's session (a stdio server's process ends)."""
        stop = self._stops.get(server)
        if stop is None:
            return
        self._loop.call_soon_threadsafe(stop.set)
        task = self._tasks.get(server)
        if task is not None:
            with contextlib.suppress(Exception):
                self._run(asyncio.wait({task}), wait)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop_all)
        with contextlib.suppress(Exception):
            self._run(self._drain(), 10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
        deadline = time.monotonic() + 5  # (a child that left the group may hold one open)
        for log in self._logs:  # the servers have ended: their last words are written
            log.wait(max(0.0, deadline - time.monotonic()))

    # ---- the loop's thread -----------------------------------------------------------
    def _run(self, coro, timeout: float):
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, timeout), self._loop)
        try:
            return future.result(timeout + 1)
        except (asyncio.TimeoutError, TimeoutError):
            future.cancel()
            raise TimeoutError from None

    def _stop_all(self) -> None:
        """Every session ends; a server still starting (or past its start
        deadline, its task cancelled and still ending) is cancelled: its
        process is stopped and its log closed before the loop stops (not
        left to the loop thread's end, the log waited for in vain)."""
        for stop in self._stops.values():
            stop.set()
        for name, task in self._tasks.items():
            ready = self._starting.get(name)
            if ready is not None and not ready.done() and not task.cancelling():
                task.cancel()  # (once: a second cancel would cut its shielded cleanup)

    async def _drain(self) -> None:
        while self._sessions or not all(task.done() for task in self._tasks.values()):
            await asyncio.sleep(0.02)

    async def _start(self, spec: ServerSpec) -> None:
        """Start `spec`'s session (on the loop's thread): one start per
        server at a time, a second caller waits for the first's."""
        starting = self._starting.get(spec.name)
        if starting is not None and not starting.done():
            with contextlib.suppress(Exception):  # the first caller says what went wrong
                await asyncio.shield(starting)
            return
        ready: asyncio.Future = self._loop.create_future()
        self._starting[spec.name] = ready
        self._stops[spec.name] = asyncio.Event()
        self._tasks[spec.name] = self._loop.create_task(self._hold(spec, ready))
        try:
            await asyncio.shield(ready)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.notes[spec.name] = _said(e)

    async def _hold(self, spec: ServerSpec, ready: asyncio.Future) -> None:
        """Open the server's session, list its tools, keep it until stopped."""
        from mcp import ClientSession

        session, stop = None, self._stops[spec.name]
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = (await stack.enter_async_context(
                    await self._transport(spec, stack)))[:2]
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                listed = await session.list_tools()
                self._tools[spec.name] = self._checked(spec.name, listed.tools)
                self._sessions[spec.name] = session
                ready.set_result(True)
                await stop.wait()
        except BaseException as e:  # noqa: BLE001 (said, never raised on the loop)
            if not ready.done():
                ready.set_exception(e if isinstance(e, Exception) else RuntimeError(str(e)))
                ready.exception()  # (said by _start where awaited; a start given up on: not logged)
            elif self._tasks.get(spec.name) is asyncio.current_task():  # not restarted since
                self.notes[spec.name] = f"{STOPPED}: {_said(e)}"
        finally:
            if session is not None and self._sessions.get(spec.name) is session:
                self._sessions.pop(spec.name, None)

    async def _transport(self, spec: ServerSpec, stack: contextlib.AsyncExitStack):
        if spec.kind == "stdio":
            from mcp import StdioServerParameters

            from .stdio_bound import bounded_stdio_client

            path = self.log_path(spec.name)
            if path is None:
                errlog = stack.enter_context(open(os.devnull, "wb"))
            else:  # its stderr through a pipe into a log of bounded size
                log = ServerLog(path, self.log_bytes)
                self._logs = [g for g in self._logs if not g.wait(0)] + [log]
                stack.callback(log.spawned)  # (if it never started)
                errlog = log.stderr
            return bounded_stdio_client(StdioServerParameters(
                command=spec.command, args=list(spec.args), env=spec.env or None), errlog)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        client = await stack.enter_async_context(
            httpx2.AsyncClient(headers=spec.headers, timeout=self.call_s))
        return streamable_http_client(spec.url, http_client=client)

    def _checked(self, server: str, tools) -> list[Tool]:
        out, names, odd = [], set(), []
        for tool in tools:
            schema = getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", None)
            if not isinstance(tool.name, str) or not isinstance(schema, dict):
                continue
            if not TOOL_NAME.match(tool.name) or tool.name in names:
                odd.append(ascii(tool.name[:80]))  # (escaped: a note is shown as it is)
                continue
            names.add(tool.name)
            out.append(Tool(server, tool.name, str(tool.description or "")[:2000], schema))
        if odd:
            self.notes[server] = (f"{len(odd)} tool(s) left out, their names not letters, "
                                  f"digits, _ . - (or given twice): {', '.join(odd[:5])}")
        if len(out) > MAX_TOOLS:
            self.notes[server] = (f"{self.notes[server]}; " if odd else "") + (
                                  f"lists {len(out)} tools; the first {MAX_TOOLS} are offered "
                                  "to the model")
            out = out[:MAX_TOOLS]
        return out


def _result(result) -> ToolResult:
    parts = []
    for item in getattr(result, "content", None) or ():
        kind = getattr(item, "type", "")
        parts.append(item.text if kind == "text" else f"[{kind or 'content'} not shown]")
    text = "\n".join(parts)
    if len(text) > MAX_RESULT_CHARS:
        cut = len(text) - MAX_RESULT_CHARS
        text = text[:MAX_RESULT_CHARS] + f"\n[… {cut:,} more characters cut by Tandem]"
    return ToolResult(text, bool(getattr(result, "is_error", False)))


def _closed(e: BaseException) -> bool:
    """The session's connection is gone (the server crashed or closed its pipe)."""
    import anyio

    return isinstance(e, (anyio.ClosedResourceError, anyio.BrokenResourceError, EOFError,
                          ConnectionError)) or "Connection closed" in str(e)


def _said(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup) and e.exceptions:
        return _said(e.exceptions[0])
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
