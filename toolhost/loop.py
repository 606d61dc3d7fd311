"""The tool loop (issue 36): the model answers with the tools offered; each
call it makes is checked (a tool it invents, or arguments that fail the
tool's schema, get an error result it sees), approved (`approve(call)`:
nothing runs without it), run on its server, and its result goes back as a
tool turn; the answer continues, up to `rounds` rounds of calls (calls
past that are not run, and the answer says so; the tools stay in the
prompt, so its prefix stays warm). The conversation's prefix is warm at each round:
the prompt is the last one plus the turns added.

`choice` applies to the first round only ("required", or a tool's name to
force it); later rounds are "auto". Qt-free: the CLI and the app use it."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Callable

from .host import Tool, ToolHost, ToolResult

ROUNDS = 8


@dataclass
class Call:
    id: str
    tool: str
    arguments: dict
    server: str = ""
    result: ToolResult | None = None
    approved: bool = False


@dataclass
class LoopOutcome:
    messages: list[dict]  # the conversation with every turn this loop added
    calls: list[Call] = field(default_factory=list)
    finished: object = None  # the last answer's engine Finished


def run(engine, messages: list[dict], host: ToolHost, tools: list[Tool],
        approve: Callable[[Call], bool], params, choice: str | None = None,
        rounds: int = ROUNDS, on_call: Callable[[Call], None] = lambda call: None,
        timeout: float = 600.0) -> LoopOutcome:
    by_name = {t.name: t for t in tools}
    functions = [t.as_function() for t in tools]
    out = LoopOutcome(list(messages))
    for round_no in range(rounds + 1):
        tool_choice = _choice(choice) if round_no == 0 else "auto"
        prepared = engine.prepare(out.messages, tools=functions, tool_choice=tool_choice)
        done = engine.submit(prepared, params).result(timeout)
        out.finished = done
        calls = [_call(engine, raw, functions) for raw in done.tool_calls]
        calls = [c for c in calls if c is not None]
        if done.reason not in ("stop", "length") or not calls or round_no == rounds:
            # The tools stay in the prompt (its prefix warm); past the limit
            # the calls are not run, and the answer says so.
            limit = f"\n[Tool calls stopped: {rounds} rounds.]" if calls else ""
            out.messages.append({"role": "assistant", "content": done.text + limit})
            return out
        out.messages.append({"role": "assistant", "content": done.text, "tool_calls": [
            {"id": c.id, "type": "function",
             "function": {"name": c.tool, "arguments": c.arguments}} for c in calls]})
        for call in calls:
            call.result = _run_one(call, by_name, host, approve)
            out.calls.append(call)
            on_call(call)
            out.messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": call.result.text})
    return out


def _choice(choice: str | None):
    if choice in (None, "auto", "required", "none"):
        return choice or "auto"
    return {"type": "function", "function": {"name": choice}}


def _call(engine, raw: str, functions) -> Call | None:
    try:
        parsed = engine.parse_tool_call(raw, functions)
    except Exception:
        return Call("call_" + secrets.token_hex(8), "?", {"_raw": raw})
    if isinstance(parsed, list):
        parsed = parsed[0] if parsed else None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("name"), str):
        return Call("call_" + secrets.token_hex(8), "?", {"_raw": raw})
    args = parsed.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            args = {"_raw": args}
    return Call("call_" + secrets.token_hex(8), parsed["name"],
                args if isinstance(args, dict) else {"value": args})


def _run_one(call: Call, by_name: dict[str, Tool], host: ToolHost,
             approve: Callable[[Call], bool]) -> ToolResult:
    tool = by_name.get(call.tool)
    if call.tool == "?":
        return ToolResult("The call could not be read (cut short, or not the tool-call "
                          "format): nothing ran.", True)
    if tool is None:
        return ToolResult(f"There is no tool named {call.tool!r}; the tools are: "
                          f"{', '.join(sorted(by_name)) or 'none'}.", True)
    call.server = tool.server
    problem = _schema_problem(tool.schema, call.arguments)
    if problem:
        return ToolResult(f"The arguments do not fit {tool.name}'s schema: {problem}", True)
    call.approved = bool(approve(call))
    if not call.approved:
        return ToolResult("The user did not allow this call.", True)
    return host.call(tool.server, tool.name, call.arguments)


def _schema_problem(schema: dict, arguments: dict) -> str | None:
    import jsonschema

    try:
        jsonschema.validate(arguments, schema)
    except jsonschema.ValidationError as e:
        return e.message
    except jsonschema.SchemaError:
        return None  # the server's schema is broken: let the server judge
    return None
