"""`tandem generate --mcp CONFIG`: the tool loop (toolhost/loop.py) in the
terminal, for scripting and tests. CONFIG is the `mcpServers` JSON; each
call and its result are printed (stderr), the final answer on stdout. A
tool is its server and its name: one not named in --allow-tools
(SERVER/TOOL) asks on the terminal; with no terminal to ask, the call is
refused (the model sees that). Everything a server sent (names, notes,
results) is printed escaped (app/ui/terminal.py); the tools offered are
fitted to the model (toolhost/offer.py), each left out said."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from app.ui.terminal import terminal_text


def add_arguments(gen) -> None:
    gen.add_argument("--mcp", default=None, metavar="CONFIG",
                     help="MCP servers (an mcpServers JSON file) whose tools the model may call")
    gen.add_argument("--allow-tools", default="", metavar="SERVER/TOOL,...",
                     help="tools that run without asking (others ask on the terminal); a "
                          "bare TOOL only when one server lists it")
    gen.add_argument("--tool-choice", default="auto", choices=["auto", "required", "none"],
                     help="whether the first round must call a tool")
    gen.add_argument("--force-tool", default=None, metavar="NAME",
                     help="the tool the first round must call (SERVER/TOOL, or the name "
                          "offered: SERVER_TOOL where two servers list TOOL)")
    gen.add_argument("--tool-rounds", type=int, default=8, metavar="N",
                     help="at most this many rounds of tool calls")
    gen.add_argument("--list-tools", action="store_true",
                     help="with --mcp: list each tool the servers offer (allowed or asks, fits "
                          "the model's context or left out, its description's first line), "
                          "then exit; reads the model's tokenizer, not its weights")


def _say(text: str) -> None:
    """A line on stderr: everything a tool server sent (names, descriptions,
    notes, results) and a model wrote is outside text, escapes shown as \\xNN."""
    print(terminal_text(text), file=sys.stderr, flush=True)


def _allowed(spec: str, tools) -> set[tuple[str, str]]:
    """--allow-tools as (server, tool) pairs: `server/tool`, or a bare tool
    name only one server lists; ValueError names one that several list."""
    out = set()
    for item in (x.strip() for x in spec.split(",")):
        server, slash, name = item.partition("/")  # (a server's name has no "/")
        if not item:
            continue
        if slash:
            out.add((server, name))
            continue
        servers = sorted({t.server for t in tools if t.name == item})
        if len(servers) > 1:
            raise ValueError(f"--allow-tools {item}: the servers {', '.join(servers)} each "
                             f"list {item}; name one as SERVER/{item}")
        out |= {(s, item) for s in servers}
    return out


def _approver(allowed: set[tuple[str, str]]):
    """Approval by (server, tool): allowed, asked on the terminal, or refused."""
    def approve(call) -> bool:
        key = (call.server, call.name or call.tool)
        if key in allowed:
            return True
        what = f"{call.server}/{call.name or call.tool}"
        if not sys.stdin.isatty():
            _say(f"tandem: {what} not allowed (no terminal to ask; see --allow-tools)")
            return False
        answer = input(terminal_text(f"Allow {what}({json.dumps(call.arguments)})? "
                                     "[y/N/a=always] "))
        if answer.strip().lower() in ("a", "always"):
            allowed.add(key)
            return True
        return answer.strip().lower() in ("y", "yes")
    return approve


def _shown(call) -> None:
    """A call and its result on the terminal: a tool server's text and a
    model's arguments are outside text (escape sequences shown as \\xNN)."""
    arrow = "error" if call.result.is_error else "result"
    arguments = json.dumps(call.arguments, ensure_ascii=False)
    what = f"{call.server}/{call.name}" if call.server else call.tool
    _say(f"→ {what}({arguments})")
    _say(f"← {arrow}: {call.result.text}")


def _specs(args):
    """The servers of --mcp CONFIG, or None after saying why."""
    from toolhost.config import ConfigError, parse

    try:
        return parse(Path(args.mcp).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ConfigError) as e:
        _say(f"tandem: --mcp {args.mcp}: {e}")
        return None


def _cannot_call(model) -> str | None:
    """Why `model` (an engine, or its prompt side) cannot call tools."""
    if not model.capabilities.chat:
        return "this model has no chat template (a base model); it cannot call tools"
    if not model.capabilities.tools:
        return "this model has no tool-call format; it cannot call tools"
    return None


def generate_with_tools(args, engine, messages: list[dict], params) -> int:
    from toolhost import loop, offer
    from toolhost.host import ToolHost

    from app.ui.answer_stats import stats_line, summed

    specs = _specs(args)
    if specs is None:
        return 2
    problem = _cannot_call(engine)
    if problem:
        _say(f"tandem: {problem}")
        return 2
    host = ToolHost(specs)
    try:
        tools = host.tools()
        for server, note in host.notes.items():
            _say(f"tandem: MCP server {server}: {note}")
        tools, notes = offer.fit(engine, tools)
        for note in notes:
            _say(f"tandem: {note}")
        if not tools:
            _say("tandem: no tools to offer")
            return 2
        try:
            allowed = _allowed(args.allow_tools, tools)
        except ValueError as e:
            _say(f"tandem: {e}")
            return 2
        choice = args.tool_choice
        if args.force_tool:
            choice = offer.named(tools, args.force_tool)
            if choice is None:
                _say(f"tandem: --force-tool {args.force_tool}: no tool offered has that name; "
                     f"the tools are: {', '.join(offer.offered(tools))}")
                return 2
        outcome = loop.run(engine, messages, host, tools, _approver(allowed), params,
                           choice=choice, rounds=max(args.tool_rounds, 0), on_call=_shown)
    finally:
        host.close()
    print(terminal_text(outcome.messages[-1]["content"]), flush=True)
    done = outcome.finished
    rounds, calls = len(outcome.answers), len(outcome.calls)
    _say(stats_line(summed(outcome.answers), f"{rounds} round{'s' if rounds != 1 else ''}, "
                                             f"{calls} tool call{'s' if calls != 1 else ''}"))
    return 1 if done is None or done.reason == "error" else 0


def list_tools(args) -> int:
    """`--list-tools`: each tool the servers list, as the model would be
    offered it (toolhost/offer.py), on stdout; exit 0 (2: none, or the model
    cannot call tools). The fit needs the tokenizer and template only."""
    from engine import EngineError
    from engine.prompt import PromptOnly
    from toolhost import offer
    from toolhost.host import ToolHost

    specs = _specs(args)
    if specs is None:
        return 2
    try:
        model = PromptOnly.load(args.model)
    except EngineError as e:
        _say(f"tandem: {e}")
        return 2
    problem = _cannot_call(model)
    if problem:
        _say(f"tandem: {problem}")
        return 2
    host = ToolHost(specs)
    try:
        tools = host.tools()
        for server, note in host.notes.items():
            _say(f"tandem: MCP server {server}: {note}")
    finally:
        host.close()
    if not tools:
        _say("tandem: no tools to offer")
        return 2
    try:
        allowed = _allowed(args.allow_tools, tools)
    except ValueError as e:
        _say(f"tandem: {e}")
        return 2
    measured = offer.measure(model, tools)
    kept, _ = offer.choose(tools, measured, model.context_length)  # (its notes: the table)
    for line in _tool_lines(tools, measured, {(t.server, t.name) for t in kept}, allowed):
        print(terminal_text(line))
    used = sum(measured[(t.server, t.name)] for t in kept)
    _say(f"tandem: {len(kept)} of {len(tools)} tools fit: {used:,} tokens of the "
         f"{int(model.context_length * offer.SHARE):,} the tools may take ({offer.SHARE:.0%} "
         f"of the model's {model.context_length:,}-token context)")
    return 0


def _tool_lines(tools: list, measured: dict, kept: set, allowed: set) -> list[str]:
    """A line a tool, in columns: SERVER/TOOL (and the name offered where
    another server lists the same), allowed or asks, fits or left out, and
    its description's first line."""
    from toolhost.offer import offered

    rows = [("TOOL", "RUNS", "FITS", "DESCRIPTION")]
    for name, tool in offered(tools).items():
        key = (tool.server, tool.name)
        cost = measured.get(key, 0)
        fits = (f"yes, {cost:,} tokens" if key in kept else
                f"no: {cost}" if isinstance(cost, str) else f"no, {cost:,} tokens: over the budget")
        shown = f"{tool.server}/{tool.name}" + (f" (as {name})" if name != tool.name else "")
        about = (tool.description or "").strip().splitlines()
        rows.append((shown, "allowed" if key in allowed else "asks", fits,
                     about[0].strip() if about else ""))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return ["  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[3]]).rstrip()
            for row in rows]
