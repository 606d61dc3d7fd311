"""A model's tool calls in OpenAI's shape: each raw call (the text between
the model's markers, `Finished.tool_calls`) read by the model's own parser
(mlx-lm's, through `Engine.parse_tool_call`) and given an id. A call the
parser cannot read is kept as text, not dropped; one the answer ended inside
(max_tokens: `Finished.cut_call`) is a call with the arguments written so
far, marked incomplete, when its name was written whole."""

from __future__ import annotations

import json
import secrets
from typing import NamedTuple

from engine import cut_call


class ReadCalls(NamedTuple):
    calls: list[dict]  # OpenAI tool_calls
    unread: str  # the text of calls that could not be read
    incomplete: bool  # the last of `calls` is the cut one: its arguments are a beginning


def read_calls(engine, raw_calls, tools, cut: bool = False) -> ReadCalls:
    """The calls in `raw_calls`; `cut`: the answer ended inside the last one."""
    calls, unread, incomplete = [], [], False
    for i, raw in enumerate(raw_calls):
        try:
            parsed = engine.parse_tool_call(raw, tools)
        except Exception:
            partial = cut_call(raw) if cut and i == len(raw_calls) - 1 else None
            if partial is None:
                unread.append(raw)
            else:
                calls.append(_call(partial["name"], partial["arguments"]))
                incomplete = True
            continue
        for call in parsed if isinstance(parsed, list) else [parsed]:
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                unread.append(raw)
                continue
            args = call.get("arguments", {})
            try:
                text = args if isinstance(args, str) else json.dumps(
                    args, ensure_ascii=False, allow_nan=False)
            except (TypeError, ValueError):  # not JSON (a parser reading Python literals)
                unread.append(raw)
                continue
            calls.append(_call(call["name"], text))
    return ReadCalls(calls, "".join(unread), incomplete)


def _call(name: str, arguments: str) -> dict:
    return {"id": f"call_{secrets.token_hex(12)}", "type": "function",
            "function": {"name": name, "arguments": arguments}}
