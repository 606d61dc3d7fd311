"""A chat's tool loop in the window (issue 36), the app's side of
toolhost/loop.py: an answer that calls tools is kept with its calls; each
call is checked (a tool the model invents, or arguments that fail the
tool's schema, get an error result), asked about in the chat unless this
chat always allows that tool or its server does not ask, run on the
window's MCP host, and shown as a block with its result; then the answer
goes on as a new request whose prompt is the last one plus the turns
added (its prefix warm in the cache), up to the rounds limit. Stop cancels
a running call, and nothing runs after it.

Each call's wait (asking, then running) is reported by `waited` for the
Scheduler dock's timeline."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Signal

from toolhost import loop, offer
from toolhost.host import Tool, ToolResult
from toolhost.offer import offered

from app.tools.service import ToolService
from app.tools.tools_menu import ToolsButton, key
from app.ui.terminal import terminal_text

STOPPED_BEFORE = "Stopped by the user: the call did not run."


@dataclass(eq=False)
class _Pending:
    call: loop.Call
    problem: ToolResult | None  # why it cannot run (checked before asking)
    index: int = -1  # its block in the conversation
    ticket: object = None  # the running call (app/tools/service.py)
    asked_at: float = 0.0
    started_at: float | None = None


@dataclass(eq=False)
class _Loop:
    # The tools offered (a name two servers share is offered as
    # `<server>_<name>`: toolhost/offer.py; a call goes to the tool named).
    tools: list[Tool]
    round_no: int = 0
    queue: list[_Pending] = field(default_factory=list)
    current: _Pending | None = None
    stopping: bool = False

    @classmethod
    def of(cls, tools: list[Tool]) -> _Loop:
        return cls(list(tools))

    @property
    def by_name(self) -> dict[str, Tool]:
        return offered(self.tools)

    @staticmethod
    def key(call: loop.Call) -> str:
        """The call's tool as the chat's choices name it (server/tool)."""
        return key(call.server, call.name or call.tool)


class ToolRounds(QObject):
    """One per window, beside ChatRequests (app/chat/chat_requests.py)."""

    # (row: the chat, its title, what was waited for, start, end, why) for the timeline
    waited = Signal(str, str, str, float, float, str)

    def __init__(self, requests, window):
        super().__init__(requests)
        self._requests, self._window = requests, window
        self.service = ToolService(window.store, self)  # the window's MCP host
        self._loops: dict[object, _Loop] = {}  # tab -> its loop, while one runs
        self.service.call_done.connect(self._on_call_done)
        window.engine_ready.connect(self._on_engine)  # a model loaded: can it call tools?
        self.service.measure(getattr(window, "engine", None))  # (one loaded already)

    def open_servers(self):
        """Tools > MCP servers…: the tool servers chats may call."""
        from app.tools.servers_dialog import ServersDialog

        dialog = ServersDialog(self.service, self._window)
        dialog.open()
        return dialog

    def close(self) -> None:
        """The window closes: every tool server stops."""
        for tab in list(self._loops):
            self.forget(tab)
        self.service.close()

    def _on_engine(self) -> None:
        self.service.measure(self._window.engine)  # the tools as this model takes them
        for tab in self._window.chat_tabs():
            self.show_engine(tab, self._window.engine)

    # ---- a tab's tools ---------------------------------------------------------------
    def adopt(self, tab) -> None:
        button = ToolsButton(self.service, tab.tool_choices)
        button.changed.connect(tab.settings_changed.emit)
        button.servers_requested.connect(self.open_servers)
        tab.install_tools(button)
        tab.approval.decided.connect(lambda answer, t=tab: self._decided(t, answer))
        self.show_engine(tab, self._window.engine)
        service = self.service
        if tab.tool_choices.on and not service.tools and not service.listing:
            service.refresh()  # its tools are on: their servers start now, not at Send

    @staticmethod
    def unavailable(engine) -> str | None:
        """Why the loaded model cannot call tools, or None."""
        if engine is None:
            return "No model is loaded yet."
        if engine.capabilities.tools:
            return None
        if not engine.capabilities.renders_locally:
            return ("The loaded model runs on another server, which takes no tools from "
                    "Tandem (yet).")
        return (f"{engine.model_info.label} has no tool-call format in its chat template, so "
                "it cannot call tools. Load a model that can (Qwen2.5, Llama 3.1, Mistral "
                "instruct models, ...).")

    def show_engine(self, tab, engine) -> None:
        if tab.tools_button is not None:
            tab.tools_button.set_unavailable(self.unavailable(engine))

    def offer(self, tab, next_round: bool) -> tuple[list[dict] | None, object]:
        """(the tools offered, tool_choice) for the tab's request: a user's
        message starts a loop with the chat's tools on; a next round keeps
        that loop's tools (the prompt's prefix stays warm)."""
        if not next_round:
            self._loops.pop(tab, None)
            tools = tab.tools_button.offered() if tab.tools_button is not None else []
            tools = self._fitted(tab, tools)
            if not tools:
                return None, None
            self._loops[tab] = _Loop.of(tools)
        state = self._loops.get(tab)
        if state is None or not tab.tools_usable:  # (a model without tools loaded since)
            return None, None
        first = state.round_no == 0 and tab.tool_choices.require
        return loop.functions_of(state.tools), "required" if first else "auto"

    def _fitted(self, tab, tools: list[Tool]) -> list[Tool]:
        """The chat's tools the model can take (toolhost/offer.py: measured on
        a worker when listed): one its template refuses is left out, and those
        past half its context; the chat's footer and Tools menu say which."""
        engine, service = self._window.engine, self.service
        notes: list[str] = []
        if tools and engine is not None and service.measured_for is engine:
            tools, notes = offer.choose(tools, service.measured, engine.context_length)
        if tab.tools_button is not None:
            tab.tools_button.left_out = notes
        if notes:
            tab.footer.setText(terminal_text("⚠ " + " · ".join(notes))[:600])
        return tools

    # ---- a prompt the engine refused -------------------------------------------------
    @staticmethod
    def spelled(job, error) -> bool:
        """The prompt was refused because a tool call in the chat spells one
        of the model's control tokens (a model told so by a tool's result,
        say): a call's arguments go into the template as they are, so the
        chat could never go on. Sent once more with its tool turns as plain
        text (message text is data: it may spell anything)."""
        return (not job.flat and "control tokens" in str(error)
                and any(m.get("tool_calls") for m in job.messages))

    @staticmethod
    def flat(tab) -> list[dict]:
        return tab.conversation.prompt(tab.system_prompt.text().strip(), tools=False)

    # ---- an answer ended -------------------------------------------------------------
    def after_answer(self, tab, finished) -> bool:
        """The answer just kept (the conversation's last message) called
        tools: run them, and True (the chat stays busy until the next round)."""
        return bool(self._guarded(tab, self._after_answer, tab, finished))

    def _guarded(self, tab, step, *args):
        """A step of the loop; if it fails (a bug, a parser's odd output), the
        loop ends, saying so, and the chat is never left busy."""
        try:
            return step(*args)
        except Exception as e:  # noqa: BLE001 (said in the chat, the chat usable)
            self._loops.pop(tab, None)
            tab.approval.hide()
            tab.conversation.end_tools()
            tab.set_tools_busy(False)
            tab.footer.setText(f"⚠ The tool calls stopped: {type(e).__name__}: {e}")
            return None

    def _after_answer(self, tab, finished) -> bool:
        state, conversation = self._loops.get(tab), tab.conversation
        index = len(conversation.messages) - 1
        if state is None or not finished.tool_calls or finished.reason not in ("stop", "length") \
                or index < 0 or conversation.messages[index]["role"] != "assistant":
            self._loops.pop(tab, None)
            return False
        functions = loop.functions_of(state.tools)
        calls = loop.read_calls(self._window.engine, finished, functions)
        limit = self.service.settings.rounds
        if not calls or state.round_no >= limit:
            self._loops.pop(tab, None)
            if calls:  # past the limit: not run, and the answer says so
                message = conversation.messages[index]
                message["content"] += loop.stopped_note(limit)
                self._store_answer(message)
                self._show(tab, index)
                tab.footer.setText(f"Tool calls stopped after {limit} rounds (Tools > MCP "
                                   "servers… sets the limit).")
            return False
        pending = [_Pending(call, loop.check(call, state.by_name)) for call in calls]
        conversation.record_calls(index, [_shown(p.call) for p in pending])
        self._store_answer(conversation.messages[index])
        self._show(tab, index)
        tab.set_tools_busy(True)
        state.queue = pending
        self._next(tab)
        return True

    def _store_answer(self, message: dict) -> None:
        if message.get("id") is not None:
            self._window.store.update_message(message["id"], message["content"],
                                              tool=message.get("tool") or {})

    # ---- one call after another ------------------------------------------------------
    def _next(self, tab) -> None:
        state = self._loops.get(tab)
        if state is None:
            return
        if not state.queue:
            self._round_over(tab, state)
            return
        pending = state.current = state.queue.pop(0)
        call, conversation = pending.call, tab.conversation
        pending.asked_at = time.monotonic()
        if state.stopping:
            self._finish(tab, pending, ToolResult(STOPPED_BEFORE, True), "stopped")
        elif pending.problem is not None:
            self._finish(tab, pending, pending.problem, "refused")
        elif state.key(call) in tab.tool_choices.always or not self.service.asks(call.server):
            self._run(tab, pending)
        else:
            pending.index = conversation.add_tool_turn(_shown(call), "asking")
            self._show(tab, pending.index)
            tab.approval.ask(call.server, call.tool, call.arguments)

    def _decided(self, tab, answer: str) -> None:
        self._guarded(tab, self._decide, tab, answer)

    def _decide(self, tab, answer: str) -> None:
        state = self._loops.get(tab)
        pending = state.current if state is not None else None
        if pending is None or pending.ticket is not None or state.stopping:
            return
        call = pending.call
        if answer == "deny":
            self._finish(tab, pending, ToolResult(loop.DENIED, True), "denied")
            return
        if answer == "always":
            tab.tool_choices.always.add(state.key(call))
            tab.settings_changed.emit()  # stored with the chat
        self._run(tab, pending)

    def _run(self, tab, pending: _Pending) -> None:
        call, conversation = pending.call, tab.conversation
        call.approved = True
        if pending.index < 0:
            pending.index = conversation.add_tool_turn(_shown(call), "running")
        else:
            conversation.messages[pending.index]["tool"]["status"] = "running"
        self._show(tab, pending.index)
        pending.started_at = time.monotonic()
        pending.ticket = self.service.call(call.server, call.name, call.arguments)

    def _on_call_done(self, ticket, result: ToolResult) -> None:
        for tab, state in list(self._loops.items()):
            pending = state.current
            if pending is not None and pending.ticket is ticket:
                stopped = getattr(ticket, "cancelled", False)
                self._guarded(tab, self._finish, tab, pending, result, "stopped" if stopped
                              else "error" if result.is_error else "result")
                return

    def _finish(self, tab, pending: _Pending, result: ToolResult, status: str) -> None:
        """A call's outcome: into its block, the database and the timeline."""
        conversation, store = tab.conversation, self._window.store
        call = pending.call
        call.result = result
        if pending.index < 0:
            pending.index = conversation.add_tool_turn(_shown(call), status)
        conversation.set_tool_result(pending.index, result.text, status, result.is_error)
        message = conversation.messages[pending.index]
        message["id"] = store.add_message(tab.chat_id, "tool", result.text,
                                          parent_id=conversation.parent_id(pending.index),
                                          tool=message["tool"])
        self._show(tab, pending.index)
        now = time.monotonic()
        asked = (pending.started_at or now) - pending.asked_at
        ran = now - pending.started_at if pending.started_at is not None else 0.0
        self.waited.emit(str(tab.chat_id), tab.title, call.tool, pending.asked_at, now,
                         f"tool {call.tool} ({call.server or 'no server'}): "
                         f"{'asked ' + format(asked, '.1f') + ' s, ' if asked >= 0.05 else ''}"
                         f"{'ran ' + format(ran, '.2f') + ' s' if pending.started_at else status}")
        state = self._loops.get(tab)
        if state is not None:
            state.current = None
        self._next(tab)

    def _show(self, tab, index: int) -> None:
        conversation = tab.conversation
        message = conversation.messages[index]
        tab.transcript.replace_last(index, message, conversation.footers.get(index),
                                    tab.message_actions(index, message), tab.version(index))

    def _round_over(self, tab, state: _Loop) -> None:
        conversation = tab.conversation
        if state.stopping:
            self._loops.pop(tab, None)
            conversation.end_tools()
            tab.set_tools_busy(False)
            tab.footer.setText("Stopped: the tool calls after it did not run.")
            return
        state.round_no += 1
        conversation.next_round()
        tab.set_tools_busy(True)
        tab.transcript.show_streaming("")
        self._requests.submit(tab, tab.prompt_messages(), next_round=True)

    # ---- Stop, a closed tab ---------------------------------------------------------
    def active(self, tab) -> bool:
        state = self._loops.get(tab)
        return state is not None and (state.current is not None or bool(state.queue))

    def stop(self, tab) -> None:
        """Stop: a running call is cancelled, one being asked about is not
        run, nor is any after it; no next round."""
        state = self._loops.get(tab)
        if state is None:
            return
        state.stopping = True
        tab.approval.hide()
        pending = state.current
        if pending is not None and pending.ticket is not None:
            pending.ticket.cancel()  # its result ("stopped") comes by call_done
        elif pending is not None:
            self._finish(tab, pending, ToolResult(STOPPED_BEFORE, True), "stopped")

    def forget(self, tab) -> None:
        state = self._loops.pop(tab, None)
        if state is not None and state.current is not None and state.current.ticket:
            state.current.ticket.cancel()


def _shown(call: loop.Call) -> dict:
    return {"id": call.id, "name": call.tool, "server": call.server,
            "arguments": call.arguments}
