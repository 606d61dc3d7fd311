"""The checks a chat file's fields go through, in either format Tandem reads
(chat_json.py: its own export; openai_chat.py: an OpenAI-style list).

Qt-free. A field that cannot be kept refuses the whole file with
ImportError_, whose message says which message and why.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, NoReturn

from app.conversation.chat_images import read_image_bytes

MAX_FILE_IMAGES = 1000
MAX_CALLS = 64  # an answer's tool calls kept from a file
MAX_TOOL_JSON = 1 << 20  # a call's arguments, as JSON


class ImportError_(ValueError):
    """A file that is not a chat Tandem can import; the message says why."""


def fail(why: str) -> NoReturn:
    raise ImportError_(why)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_base64(label: str, name: str, payload: str, lost: list[str]):
    """An image's base64 read and checked (ImageFile `name`), or None with
    why said in `lost` under `label`."""
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        lost.append(f"{label}: not base64")
        return None
    image = read_image_bytes(name, data)
    if image.error:
        lost.append(f"{label}: {image.error}")
        return None
    return image


def _text(value: Any, limit: int = 200) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _arguments(value: Any, i: int) -> Any:
    """A call's arguments as written (an object, or the text a model wrote),
    bounded in size; anything else refuses the file."""
    if value is None:
        return {}
    if not isinstance(value, (dict, list, str)):
        fail(f"Message {i}'s tool call has arguments that are not an object or text.")
    try:
        size = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    except (UnicodeEncodeError, ValueError, RecursionError):
        fail(f"Message {i}'s tool call has arguments that are not valid Unicode JSON.")
    if size > MAX_TOOL_JSON:
        fail(f"Message {i}'s tool call has {size:,} bytes of arguments; at most "
             f"{MAX_TOOL_JSON:,}.")
    return value


def tool_call(raw: Any, i: int) -> dict[str, Any]:
    """Message `i`'s tool call {id, name, server, arguments}, checked."""
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        fail(f"Message {i} has a tool call without a name.")
    return {"id": _text(raw.get("id")), "name": raw["name"][:200],
            "server": _text(raw.get("server")), "arguments": _arguments(raw.get("arguments"), i)}
