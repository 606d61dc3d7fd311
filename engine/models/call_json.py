"""A tool call's arguments as JSON can carry them.

A model writes a call's arguments as JSON text. Python's `json` reads more
than JSON: the literals `NaN`, `Infinity` and `-Infinity`, and numbers out
of a double's range (`1e999`) as infinities, which `json.dumps` then writes
back as `Infinity` (not JSON: a strict encoder refuses it, a lenient one
makes it `null`). So:

- a call whose arguments hold a `NaN` / `Infinity` literal is not JSON: it
  is an unreadable call, as any other invalid JSON is (`checked_call` raises);
- `1e999` is JSON's grammar but no finite number: where the protocol carries
  the arguments as text (OpenAI's `arguments`) they go out as the model wrote
  them (`checked_call` gives that text); where an object is needed
  (Anthropic's `input`, an MCP call), `strict_loads` refuses that text and
  the caller treats it as arguments it could not read.

`cut_call` reads a call the answer ended inside (max_tokens): its name and
the arguments written so far.
"""

from __future__ import annotations

import json
import math
import re
from json.decoder import scanstring

from pydantic_core import from_json

_SPACE = re.compile(r"[ \t\n\r]*")


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of a number's range")
    return value


def strict_loads(text: str | bytes):
    """`json.loads` for JSON only: ValueError for NaN / Infinity literals and
    for numbers out of range, as for any other invalid JSON."""
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)


def finite(value) -> bool:
    """Whether `value` (parsed JSON) holds only numbers JSON can write."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return False
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def member_text(text: str, name: str, partial: bool = False) -> str | None:
    """The text of member `name` of the JSON object `text`, as written (None
    when `text` is no such object; the last one where the name repeats, the
    one `json.loads` keeps). `partial`: the object may be cut, and a cut
    value is what is left of the text."""
    s = text.strip()
    if not s.startswith("{"):
        return None
    decoder, found = json.JSONDecoder(), None
    i = _SPACE.match(s, 1).end()
    try:
        while s.startswith('"', i):
            key, i = scanstring(s, i + 1)
            i = _SPACE.match(s, i).end()
            if not s.startswith(":", i):
                return None
            i = _SPACE.match(s, i + 1).end()
            try:
                _, end = decoder.raw_decode(s, i)
            except (ValueError, RecursionError):  # cut (or malformed, or nested too deep)
                if partial and key == name and i < len(s):
                    return s[i:]
                return found if partial else None
            if key == name:
                found = s[i:end]
            i = _SPACE.match(s, end).end()
            if s.startswith("}", i):
                return found
            if not s.startswith(",", i):
                break
            i = _SPACE.match(s, i + 1).end()
    except (ValueError, RecursionError):  # a key cut (or malformed)
        return found if partial else None
    return found if partial and i >= len(s) else None


def checked_call(parsed, raw: str):
    """A parser's call(s) read from `raw`, their arguments checked: those a
    number out of range made infinite become the text the model wrote;
    ValueError for arguments JSON cannot hold (NaN / Infinity literals)."""
    calls = parsed if isinstance(parsed, list) else [parsed]
    out = []
    for call in calls:
        if isinstance(call, dict) and not finite(call.get("arguments")):
            text = member_text(raw, "arguments") if len(calls) == 1 else None
            try:
                json.loads(text or "", parse_constant=_refuse_constant)
            except ValueError:
                raise ValueError("the call's arguments are not JSON (NaN or Infinity)") \
                    from None
            call = {**call, "arguments": text}
        out.append(call)
    return out if isinstance(parsed, list) else out[0]


def cut_call(raw: str) -> dict | None:
    """A JSON call ({"name": ..., "arguments": ...}) the answer ended inside:
    {"name", "arguments": the arguments' text so far}; None when its name
    was not written whole."""
    try:
        head = from_json(raw.strip(), allow_partial="trailing-strings", allow_inf_nan=False)
        whole = from_json(raw.strip(), allow_partial=True, allow_inf_nan=False)
    except ValueError:
        return None
    name = head.get("name") if isinstance(head, dict) else None
    if not isinstance(name, str) or not isinstance(whole, dict) or whole.get("name") != name:
        return None  # cut inside the name
    return {"name": name, "arguments": member_text(raw, "arguments", partial=True) or ""}


def partial_input(text: str) -> dict:
    """The members of a cut JSON object that were written whole ({} if none)."""
    try:
        value = from_json(text, allow_partial=True, allow_inf_nan=False) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) and finite(value) else {}
