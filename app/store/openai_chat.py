"""An OpenAI-style chat in a file (`{"messages": [...]}`, or a bare list),
read into Tandem's messages: content parts' text joined, a user message's
data: URL images read and checked, an assistant's `tool_calls` and the tool
results that answer them made Tandem's tool turns.

Qt-free. chat_json.py reads the file and calls these per message.
"""

from __future__ import annotations

import json
from typing import Any

from .chat_file_checks import MAX_CALLS, MAX_FILE_IMAGES, fail, read_base64, tool_call


def openai_parts(m: dict, i: int, images: dict[str, Any], lost: list[str]) -> dict:
    """An OpenAI-style message whose content is parts: its text parts joined,
    and in a user message its image_url parts with data: URLs read and checked
    as attached images are (kept in `images`, named in the message's stats);
    one that cannot be read, or a web address (not fetched), goes in `lost`."""
    texts, records = [], []
    for j, part in enumerate(m["content"][:1000], start=1):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("text", "input_text", "output_text") and isinstance(part.get("text"), str):
            texts.append(part["text"])
            continue
        if kind not in ("image_url", "input_image") or m.get("role") != "user":
            fail(f"Message {i}'s part {j} is not text (or an image in a user message).")
        value = part.get("image_url")
        url = value.get("url") if isinstance(value, dict) else value
        name = f"image {len(records) + 1} of message {i}"
        header, _, payload = url.partition(",") if isinstance(url, str) else ("", "", "")
        if not (header.lower().startswith("data:image/") and header.lower().endswith(";base64")):
            lost.append(f"{name}: not a data: URL" + (" (web addresses are not fetched)"
                        if isinstance(url, str) and url.startswith("http") else ""))
            continue
        if len(images) >= MAX_FILE_IMAGES:
            lost.append(f"{name}: over {MAX_FILE_IMAGES} images in one file")
            continue
        image = read_base64(name, f"{name}.{header[11:-7][:10] or 'png'}", payload, lost)
        if image is None:
            continue
        images.setdefault(image.digest, image)
        records.append(image.record())
    return {**m, "content": "".join(texts), "_images": records}


def openai_tool(m: dict, role: str, i: int, names: dict[str, str]) -> dict[str, Any] | None:
    """An OpenAI-style message's tool calls (an assistant's `tool_calls`) or
    tool result (`tool_call_id`), as Tandem's tool field."""
    if role == "assistant" and m.get("tool_calls") is not None:
        calls = m["tool_calls"]
        if not isinstance(calls, list) or len(calls) > MAX_CALLS:
            fail(f"Message {i}'s tool_calls are not a list of at most {MAX_CALLS}.")
        out = []
        for raw in calls:
            function = raw.get("function") if isinstance(raw, dict) else None
            if not isinstance(function, dict):
                fail(f"Message {i} has a tool call without a function.")
            arguments = function.get("arguments")
            if isinstance(arguments, str):  # OpenAI sends them as JSON text
                try:
                    parsed = json.loads(arguments) if arguments.strip() else {}
                except (ValueError, RecursionError):
                    parsed = None
                if isinstance(parsed, dict):
                    function = {**function, "arguments": parsed}
            call = tool_call({"id": raw.get("id"), **function}, i)
            names[call["id"]] = call["name"]
            out.append(call)
        return {"calls": out} if out else None
    if role == "tool":
        call_id = m.get("tool_call_id")
        if call_id not in names:
            fail(f"Message {i} is a tool result without its call (a tool_call_id of an "
                 "assistant's tool_calls before it).")
        return {"id": call_id, "name": names[call_id],
                "server": "", "arguments": {}, "status": "result", "error": False}
    return None
