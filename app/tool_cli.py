"""`tandem generate --mcp CONFIG`: the tool loop (toolhost/loop.py) in the
terminal, for scripting and tests. CONFIG is the `mcpServers` JSON; each
call and its result are printed (stderr), the final answer on stdout. A
tool not named in --allow-tools asks on the terminal; with no terminal to
ask, the call is refused (the model sees that)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from app.ui.terminal import terminal_text


def add_arguments(gen) -> None:
    gen.add_argument("--mcp", default=None, metavar="CONFIG",
                     help="MCP servers (an mcpServers JSON file) whose tools the model may call")
    gen.add_argument("--allow-tools", default="", metavar="NAME,...",
                     help="tools that run without asking (others ask on the terminal)")
    gen.add_argument("--tool-choice", default="auto", choices=["auto", "required", "none"],
                     help="whether the first round must call a tool")
    gen.add_argument("--force-tool", default=None, metavar="NAME",
                     help="the tool the first round must call")
    gen.add_argument("--tool-rounds", type=int, default=8, metavar="N",
                     help="at most this many rounds of tool calls")


def _approver(allowed: set[str]):
    def approve(call) -> bool:
        if call.tool in allowed:
            return True
        if not sys.stdin.isatty():
            print(f"tandem: {call.tool} not allowed (no terminal to ask; see --allow-tools)",
                  file=sys.stderr)
            return False
        answer = input(terminal_text(f"Allow {call.tool}({json.dumps(call.arguments)})? "
                                     "[y/N/a=always] "))
        if answer.strip().lower() in ("a", "always"):
            allowed.add(call.tool)
            return True
        return answer.strip().lower() in ("y", "yes")
    return approve


def _shown(call) -> None:
    """A call and its result on the terminal: a tool server's text and a
    model's arguments are outside text (escape sequences shown as \\xNN)."""
    arrow = "error" if call.result.is_error else "result"
    arguments = json.dumps(call.arguments, ensure_ascii=False)
    print(terminal_text(f"→ {call.tool}({arguments})"), file=sys.stderr)
    print(terminal_text(f"← {arrow}: {call.result.text}"), file=sys.stderr, flush=True)


def generate_with_tools(args, engine, messages: list[dict], params) -> int:
    from toolhost import loop
    from toolhost.config import ConfigError, parse
    from toolhost.host import ToolHost

    try:
        specs = parse(Path(args.mcp).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ConfigError) as e:
        print(f"tandem: --mcp {args.mcp}: {e}", file=sys.stderr)
        return 2
    if not engine.capabilities.tools:
        print("tandem: this model has no tool-call format; it cannot call tools",
              file=sys.stderr)
        return 2
    host = ToolHost(specs)
    try:
        tools = host.tools()
        for server, note in host.notes.items():
            print(f"tandem: MCP server {server}: {note}", file=sys.stderr)
        if not tools:
            print("tandem: no tools to offer", file=sys.stderr)
            return 2
        allowed = {t for t in args.allow_tools.split(",") if t}
        outcome = loop.run(engine, messages, host, tools, _approver(allowed), params,
                           choice=args.force_tool or args.tool_choice,
                           rounds=max(args.tool_rounds, 0), on_call=_shown)
    finally:
        host.close()
    print(terminal_text(outcome.messages[-1]["content"]), flush=True)
    done = outcome.finished
    return 1 if done is None or done.reason == "error" else 0
