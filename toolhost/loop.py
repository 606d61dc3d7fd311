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

from engine import strict_loads

from .host import Tool, ToolHost, ToolResult
from .offer import functions_of, offered

ROUNDS = 8


@dataclass
class Call:
    id: str
    tool: str  # the name the model called (toolhost/offer.py: maybe `<server>_<name>`)
    arguments: dict
    server: str = ""  # set by `check`: the tool's server
    name: str = ""  # set by `check`: the tool's own name on its server
    result: ToolResult | None = None
    approved: bool = False
    unreadable: bool = False  # its arguments are not JSON a tool can take (`_raw` holds them)


@dataclass
class LoopOutcome:
    messages: list[dict]  # the conversation with every turn this loop added
    calls: list[Call] = field(default_factory=list)
    finished: object = None  # the last answer's engine Finished
    answers: list = field(default_factory=list)  # every round's Finished, in order


def run(engine, messages: list[dict], host: ToolHost, tools: list[Tool],
        approve: Callable[[Call], bool], params, choice: str | None = None,
        rounds: int = ROUNDS, on_call: Callable[[Call], None] = lambda call: None,
        timeout: float = 600.0) -> LoopOutcome:
    by_name = offered(tools)
    functions = functions_of(tools)
    out = LoopOutcome(list(messages))
    for round_no in range(rounds + 1):
        tool_choice = tool_choice_of(choice) if round_no == 0 else "auto"
        prepared = engine.prepare(out.messages, tools=functions, tool_choice=tool_choice)
        done = engine.submit(prepared, params).result(timeout)
        out.finished = done
        out.answers.append(done)
        calls = read_calls(engine, done, functions)
        if done.reason not in ("stop", "length") or not calls or round_no == rounds:
            # The tools stay in the prompt (its prefix warm); past the limit
            # the calls are not run, and the answer says so.
            out.messages.append({"role": "assistant",
                                 "content": done.text + (stopped_note(rounds) if calls else "")})
            return out
        out.messages.append(assistant_turn(done.text, calls))
        for call in calls:
            call.result = _run_one(call, by_name, host, approve)
            out.calls.append(call)
            on_call(call)
            out.messages.append(tool_turn(call))
    return out


def stopped_note(rounds: int) -> str:
    return f"\n[Tool calls stopped: {rounds} rounds.]"


def assistant_turn(text: str, calls: list[Call]) -> dict:
    """An answer that called tools, as the next round's prompt has it."""
    return {"role": "assistant", "content": text, "tool_calls": [
        {"id": c.id, "type": "function", "function": {"name": c.tool, "arguments": c.arguments}}
        for c in calls]}


def tool_turn(call: Call) -> dict:
    """A call's result, as the next round's prompt has it."""
    return {"role": "tool", "tool_call_id": call.id, "content": call.result.text}


def read_calls(engine, done, functions: list[dict]) -> list[Call]:
    """The calls an answer (`Finished`) made, each read by the model's parser
    (one that cannot be read is a call of tool "?": an error result)."""
    return [call for raw in done.tool_calls for call in _calls(engine, raw, functions)]


def check(call: Call, by_name: dict[str, Tool]) -> ToolResult | None:
    """Why `call` cannot run (an error result the model sees), or None; sets
    its server and the tool's own name there (`by_name`: `offer.offered`,
    the tools by the names the model is offered). Checked before anyone is
    asked to approve it."""
    tool = by_name.get(call.tool)
    if call.tool == "?":
        return ToolResult("The call could not be read (cut short, or not the tool-call "
                          "format): nothing ran.", True)
    if call.unreadable:
        return ToolResult("The call's arguments are not JSON a tool can take (not JSON, or "
                          "a number out of range such as 1e999): nothing ran.", True)
    if tool is None:
        return ToolResult(f"There is no tool named {call.tool!r}; the tools are: "
                          f"{', '.join(sorted(by_name)) or 'none'}.", True)
    call.server, call.name = tool.server, tool.name
    problem = _schema_problem(tool.schema, call.arguments)
    if problem:
        return ToolResult(f"The arguments do not fit {tool.name}'s schema: {problem}", True)
    return None


DENIED = "The user did not allow this call."


def tool_choice_of(choice: str | None):
    """The first round's tool_choice: auto / required / none, or a tool's name."""
    if choice in (None, "auto", "required", "none"):
        return choice or "auto"
    return {"type": "function", "function": {"name": choice}}


def _calls(engine, raw: str, functions) -> list[Call]:
    """The calls in one raw tool-call text (a parser may read several)."""
    unread = [Call("call_" + secrets.token_hex(8), "?", {"_raw": raw})]
    try:
        parsed = engine.parse_tool_call(raw, functions)
    except Exception:
        return unread
    out = []
    for one in parsed if isinstance(parsed, list) else [parsed]:
        if not isinstance(one, dict) or not isinstance(one.get("name"), str):
            return unread
        args, unreadable = one.get("arguments", {}), False
        if isinstance(args, str):  # JSON text (a number out of range stays text)
            try:
                args = strict_loads(args)
            except ValueError:
                args, unreadable = {"_raw": args}, True
        out.append(Call("call_" + secrets.token_hex(8), one["name"],
                        _plain(args if isinstance(args, dict) else {"value": args}),
                        unreadable=unreadable))
    return out or unread


def _plain(value) -> dict:
    """Arguments as JSON values only: a parser that reads Python literals
    (sets, bytes, complex numbers, infinities) gives what JSON cannot carry;
    shown as text."""
    try:
        return json.loads(json.dumps(value, default=str, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return {"_raw": str(value)[:4000]}


def _run_one(call: Call, by_name: dict[str, Tool], host: ToolHost,
             approve: Callable[[Call], bool]) -> ToolResult:
    problem = check(call, by_name)
    if problem is not None:
        return problem
    call.approved = bool(approve(call))
    if not call.approved:
        return ToolResult(DENIED, True)
    return host.call(call.server, call.name, call.arguments)


def _schema_problem(schema: dict, arguments: dict) -> str | None:
    import jsonschema

    try:
        jsonschema.validate(arguments, schema)
    except jsonschema.ValidationError as e:
        return e.message
    except Exception:  # a broken schema (a bad $ref, an unknown format): the server judges
        return None
    return None
