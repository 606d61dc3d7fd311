"""The tools as the model sees them.

A tool is (server, name): two servers may both list `get_weather`. The
model sees one name per tool: the server's own where no other server lists
it, else `<server>_<name>` (never two tools under one name); a call is read
back through the same table (`offered`), so it goes to the server whose
tool the model named, and approvals are keyed by server and name.

`fit` makes the tools offered fit the model (`measure` then `choose`; the
app measures on a worker, chooses at Send): a tool the model's template
refuses (a description or schema that spells one of its control tokens) is
left out, and so are tools past a share of the context (`SHARE`), each left
out with a note naming it, the others still offered."""

from __future__ import annotations

import json
from collections import Counter

from .host import Tool

SHARE = 0.5  # of the model's context, at most, for the tools' definitions
_PROBE = [{"role": "user", "content": "."}]


def offered(tools: list[Tool]) -> dict[str, Tool]:
    """The tools by the name the model is offered, in the tools' order."""
    counts = Counter(t.name for t in tools)
    names: dict[int, str] = {}
    taken = {t.name for t in tools if counts[t.name] == 1}
    for i, t in enumerate(tools):
        if counts[t.name] == 1:
            names[i] = t.name
            continue
        base = f"{t.server}_{t.name}"[:64]
        name, n = base, 2
        while name in taken:  # another tool already has it: a number after it
            name = f"{base[:60]}_{n}"
            n += 1
        taken.add(name)
        names[i] = name
    return {names[i]: t for i, t in enumerate(tools)}


def functions_of(tools: list[Tool]) -> list[dict]:
    """The tools as the chat template (and `Engine.prepare`) takes them,
    each under its offered name."""
    return [t.as_function(name) for name, t in offered(tools).items()]


def named(tools: list[Tool], wanted: str) -> str | None:
    """The offered name of `wanted` ("server/tool", or a name the model is
    offered), or None."""
    table = offered(tools)
    if wanted in table:
        return wanted
    server, _, name = wanted.partition("/")
    return next((n for n, t in table.items() if (t.server, t.name) == (server, name)), None)


def measure(engine, tools: list[Tool]) -> dict[tuple[str, str], int | str]:
    """Each tool's cost in `engine`'s tokens, or why its template refuses it
    (by (server, name)). A template and a tokenizer per tool: off a GUI thread."""
    from engine import EngineError

    out: dict[tuple[str, str], int | str] = {}
    for tool in tools:
        function = tool.as_function()
        try:
            engine.prepare(_PROBE, tools=[function])
        except EngineError as e:
            out[(tool.server, tool.name)] = str(e)
            continue
        out[(tool.server, tool.name)] = engine.count_tokens(
            json.dumps(function, ensure_ascii=False))
    return out


def choose(tools: list[Tool], measured: dict, context_length: int,
           share: float = SHARE) -> tuple[list[Tool], list[str]]:
    """The tools to offer, in their order, and a note for each left out: one
    the template refuses, then those past `share` of the context (a tool
    not measured costs nothing here)."""
    budget = int(context_length * share)
    used, kept, left, notes = 0, [], [], []
    for tool in tools:
        cost = measured.get((tool.server, tool.name), 0)
        if isinstance(cost, str):
            notes.append(f"tool {ascii(tool.name)} of {tool.server} left out: {cost}")
        elif used + cost <= budget:
            used += cost
            kept.append(tool)
        else:
            left.append(f"{tool.server}/{tool.name}")
    if left:
        shown = ", ".join(ascii(n)[1:-1] for n in left[:20]) + (
            f" and {len(left) - 20} more" if len(left) > 20 else "")
        notes.append(f"{len(left)} of {len(tools)} tools left out: offered, they would take more "
                     f"than {budget:,} tokens ({share:.0%} of the model's "
                     f"{context_length:,}-token context): {shown}")
    return kept, notes


def fit(engine, tools: list[Tool], share: float = SHARE) -> tuple[list[Tool], list[str]]:
    """The tools `engine`'s model can be offered, and a note for each left
    out: those its template refuses, then those past `share` of its context."""
    return choose(tools, measure(engine, tools), engine.context_length, share)
