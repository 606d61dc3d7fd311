"""The tools as the model sees them.

A tool is (server, name): two servers may both list `get_weather`. The
model sees one name per tool: the server's own where no other server lists
it, else `<server>_<name>` (never two tools under one name); a call is read
back through the same table (`offered`), so it goes to the server whose
tool the model named, and approvals are keyed by server and name.

`fit` makes the tools offered fit the model: a tool the model's template
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


def fit(engine, tools: list[Tool], share: float = SHARE) -> tuple[list[Tool], list[str]]:
    """The tools `engine`'s model can be offered, and a note for each left
    out: those its template refuses, then those past `share` of its context."""
    from engine import EngineError

    kept, notes = list(tools), []
    try:
        engine.prepare(_PROBE, tools=functions_of(kept))
    except EngineError:  # find the tools it refuses, one by one
        good = []
        for name, tool in offered(kept).items():
            try:
                engine.prepare(_PROBE, tools=[tool.as_function(name)])
                good.append(tool)
            except EngineError as e:
                notes.append(f"tool {ascii(tool.name)} of {tool.server} left out: {e}")
        kept = good
    budget = int(engine.context_length * share)
    used, fitted, left = 0, [], []
    for name, tool in offered(kept).items():
        cost = engine.count_tokens(json.dumps(tool.as_function(name), ensure_ascii=False))
        if used + cost <= budget:
            used += cost
            fitted.append(tool)
        else:
            left.append(f"{tool.server}/{tool.name}")
    if left:
        shown = ", ".join(ascii(n)[1:-1] for n in left[:20]) + (
            f" and {len(left) - 20} more" if len(left) > 20 else "")
        notes.append(f"{len(left)} of {len(kept)} tools left out: offered, they would take more "
                     f"than {budget:,} tokens ({share:.0%} of the model's "
                     f"{engine.context_length:,}-token context): {shown}")
    return fitted, notes
