"""A model's tool calls in OpenAI's shape: each raw call (the text between
the model's markers, `Finished.tool_calls`) read by the model's own parser
(mlx-lm's, through `Engine.parse_tool_call`) and given an id. A call the
parser cannot read (cut by max_tokens, say) is kept as text, not dropped."""

from __future__ import annotations

import json
import secrets


def read_calls(engine, raw_calls, tools) -> tuple[list[dict], str]:
    """(OpenAI tool_calls, the text of calls that could not be read)."""
    calls, unread = [], []
    for raw in raw_calls:
        try:
            parsed = engine.parse_tool_call(raw, tools)
        except Exception:
            unread.append(raw)
            continue
        for call in parsed if isinstance(parsed, list) else [parsed]:
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                unread.append(raw)
                continue
            args = call.get("arguments", {})
            calls.append({"id": f"call_{secrets.token_hex(12)}", "type": "function",
                          "function": {"name": call["name"],
                                       "arguments": args if isinstance(args, str)
                                       else json.dumps(args, ensure_ascii=False)}})
    return calls, "".join(unread)
