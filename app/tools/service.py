"""The window's MCP host (toolhost.host.ToolHost) for the GUI thread:
listing starts the servers on a worker thread (a server may take seconds
to start, or never), calls run on the host's loop, and both come back as
signals. Servers start on first use (a chat's Tools button opened, a call),
stop when removed or changed in Tools > MCP servers…, and at quit."""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal

from toolhost import offer
from toolhost.host import Tool, ToolHost, ToolResult

from app.store.journal import cache_dir
from app.tools import servers as config


@dataclass(eq=False)
class Ticket:
    """A call on its way: `cancel()` stops it (Stop)."""

    server: str
    tool: str
    future: concurrent.futures.Future | None = None
    cancelled: bool = field(default=False)

    def cancel(self) -> None:
        self.cancelled = True
        if self.future is not None:
            self.future.cancel()


def log_dir() -> Path:
    """Where stdio servers' stderr is kept (one file a server): the cache folder."""
    return cache_dir() / "mcp-logs"


class ToolService(QObject):
    listed = Signal()  # `tools` and `notes` changed (or `measured`)
    call_done = Signal(object, object)  # Ticket, ToolResult
    _listed = Signal(object, object, int)  # from the worker: tools, notes, generation
    _measured = Signal(object, object)  # from the worker: engine, its measures
    _done = Signal(object, object)

    def __init__(self, store, parent: QObject | None = None, logs: Path | None = None):
        super().__init__(parent)
        self.store = store
        self.settings = config.load(store)
        self.tools: list[Tool] = []
        self.notes: dict[str, str] = {}  # server -> what went wrong
        self.listing = False
        # The tools as the loaded model takes them (toolhost/offer.py's
        # `measure`: (server, tool) -> its tokens, or why the model refuses it),
        # measured on a worker; `measured_for`: that model's engine.
        self.measured: dict = {}
        self.measured_for = None
        self._engine = None
        self._logs = logs or log_dir()
        self._host: ToolHost | None = None
        self._generation = 0  # a listing started before a reconfigure is stale
        self._closed = False  # the window closed: no listing starts a host again
        self._lock = threading.Lock()  # one listing or reconfigure on the host at a time
        self._listed.connect(self._on_listed)
        self._measured.connect(self._on_measured)
        # Queued even from this thread: a result never arrives inside call().
        self._done.connect(self.call_done.emit, Qt.QueuedConnection)

    # ---- configuration -------------------------------------------------------------
    def configure(self, settings: config.ToolSettings) -> None:
        """Settings saved in the dialog: servers removed or changed stop now;
        none starts before a chat needs it."""
        self.settings = settings
        self._generation += 1
        self.tools = [t for t in self.tools if settings.entry(t.server) is not None]
        self.notes = {k: v for k, v in self.notes.items() if settings.entry(k) is not None}
        self.listed.emit()
        if self._host is not None or self.listing:  # in use: changed servers stop now
            self.refresh()

    def asks(self, server: str) -> bool:
        entry = self.settings.entry(server)
        return entry is None or entry.ask

    def log_path(self, server: str) -> Path:
        return self._logs / f"{server}.log"

    # ---- listing -------------------------------------------------------------------
    def refresh(self, retry: bool = False) -> None:
        """List every server's tools, starting those not running, off the GUI
        thread (`retry`: servers that stopped or failed are started again)."""
        if not self.settings.servers and self._host is None:
            self.tools, self.notes = [], {}
            self.listed.emit()
            return
        self.listing = True
        self.listed.emit()
        generation, settings = self._generation, self.settings
        threading.Thread(target=self._list, args=(settings, generation, retry),
                         name="mcp-list", daemon=True).start()

    def _list(self, settings, generation: int, retry: bool) -> None:
        try:
            tools, notes = self._listing(settings, retry)
        except Exception as e:  # the host closed under it (quit), or a bug: said
            tools, notes = [], {"tool servers": f"could not be listed: {e}"}
        if not self._closed:
            with contextlib.suppress(RuntimeError):  # the window (and this object) went
                self._listed.emit(tools, notes, generation)

    def _listing(self, settings, retry: bool):
        with self._lock:
            if self._closed:
                return [], {}
            specs, missing = config.specs(settings)
            try:
                self._logs.mkdir(parents=True, exist_ok=True)
            except OSError:
                pass  # the host says it when a server's log cannot be opened
            if self._host is None:
                self._host = ToolHost(specs, log_dir=self._logs, call_s=settings.call_s)
            else:
                self._host.call_s = settings.call_s
                self._host.set_specs(specs)
            if retry:
                for spec in specs:
                    self._host.retry(spec.name)
            host = self._host
        tools = host.tools()  # outside the lock: close() never waits for a slow start
        return tools, {**dict(host.notes), **missing}

    def _on_listed(self, tools, notes, generation: int) -> None:
        if generation != self._generation:
            return  # reconfigured since: that listing's own result follows
        self.tools, self.notes, self.listing = list(tools), dict(notes), False
        self.listed.emit()
        self.measure(self._engine)

    # ---- the tools as the model takes them ---------------------------------------------
    def measure(self, engine) -> None:
        """Measure the tools listed for `engine` (a model loaded) off the GUI
        thread; `listed` follows."""
        self._engine = engine
        tools = [t for t in self.tools
                 if (t.server, t.name) not in self.measured or self.measured_for is not engine]
        if engine is None or not getattr(engine.capabilities, "tools", False) or not tools:
            return
        threading.Thread(target=self._measure, args=(engine, tools), name="mcp-measure",
                         daemon=True).start()

    def _measure(self, engine, tools) -> None:
        try:
            measured = offer.measure(engine, tools)
        except Exception:  # noqa: BLE001 (an engine closed under it: nothing measured)
            return
        if not self._closed:
            with contextlib.suppress(RuntimeError):  # the window (and this object) went
                self._measured.emit(engine, measured)

    def _on_measured(self, engine, measured: dict) -> None:
        if engine is not self._engine:
            return  # another model loaded since: its own measures follow
        if self.measured_for is not engine:
            self.measured, self.measured_for = {}, engine
        self.measured.update(measured)
        self.listed.emit()

    # ---- calls ---------------------------------------------------------------------
    def call(self, server: str, tool: str, arguments: dict) -> Ticket:
        """Start a call; `call_done(ticket, result)` follows on the GUI thread
        (also when cancelled: a "stopped" result)."""
        ticket = Ticket(server, tool)
        host = self._host
        if host is None:
            self._done.emit(ticket, ToolResult(f"The tool server {server} is not running.",
                                               True))
            return ticket
        ticket.future = host.start_call(server, tool, arguments)
        ticket.future.add_done_callback(lambda future: self._done.emit(ticket, _outcome(future)))
        return ticket

    def close(self) -> None:
        """Stop every server (at quit); a listing under way ends with nothing."""
        self._closed = True
        host, self._host = self._host, None
        if host is not None:
            host.close()


def _outcome(future: concurrent.futures.Future) -> ToolResult:
    if future.cancelled():
        return ToolResult("Stopped by the user while it ran.", True)
    try:
        return future.result()
    except Exception as e:  # the host returns results; this is a bug's last net
        return ToolResult(f"The call failed: {type(e).__name__}: {e}", True)
