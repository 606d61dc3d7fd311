"""A chat as JSON, out and back in: every branch, the thinking, the stats.

Qt-free. Export writes the whole tree (`format: tandem-chat`, `version: 1`).
Import reads that, or a plain OpenAI-style `{"messages": [{"role",
"content"}, ...]}` / a bare list of such messages (one branch; content
parts' text joined, a user message's data: URL images kept: openai_chat.py),
checks every field before anything is written (chat_file_checks.py), and
makes a new chat: a file is data, its ids are renumbered, nothing in it can
touch another chat.
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

from app.conversation.attach_files import file_record
from app.conversation.chat_images import image_record, records_of

from .chat_file_checks import (MAX_CALLS, MAX_FILE_IMAGES, ImportError_, fail, is_int,
                               read_base64, tool_call)
from .openai_chat import openai_parts, openai_tool

__all__ = ["PARAMS", "ROLES", "ImportError_", "check_size", "export_chat", "import_chat",
           "parse_chat", "write_chat"]

FORMAT, VERSION = "tandem-chat", 1
# A chat file larger than this is refused before it is read: a chat with a
# few phone photos (base64 in the file) passes.
MAX_BYTES = 256 << 20
MAX_MESSAGES = 100_000
ROLES = ("user", "assistant", "system", "tool")
STATUSES = ("result", "error", "denied", "stopped", "refused")  # a tool turn's outcome
# A chat's sampling settings: type, least, most. The settings row's spin boxes
# (app/chat/chat_settings.py) have these ranges, and an imported chat is held to
# them: a spin box cannot show 1e308 or NaN.
PARAMS = {"temperature": (float, 0.0, 2.0), "top_p": (float, 0.05, 1.0), "top_k": (int, 0, 1000),
          "min_p": (float, 0.0, 1.0), "repetition_penalty": (float, 1.0, 2.0),
          "max_tokens": (int, 1, 32768)}


def export_chat(store, chat_id: int) -> str:
    chat = store.chat(chat_id)
    messages = store.all_messages(chat_id)
    # A draft model's path on this machine stays here (an import drops it too).
    params = {k: v for k, v in chat.params.items() if k != "drafts" or v == "off"}
    formats = {r["digest"]: r["format"] for m in messages for r in records_of(m.stats or {})}
    images = []
    for digest, fmt in formats.items():  # each image once, as attached
        data = store.image_data(digest)
        if data is not None:
            images.append({"digest": digest, "format": fmt,
                           "data": base64.b64encode(data).decode("ascii")})
    return json.dumps({
        "format": FORMAT, "version": VERSION, "title": chat.title,
        "system_prompt": chat.system_prompt, "params": params,
        "created_at": chat.created_at, "leaf": store.leaf(chat_id),
        "messages": [{"id": m.id, "parent": m.parent_id, "role": m.role, "content": m.content,
                      "reasoning": m.reasoning, "complete": m.complete, "stats": m.stats,
                      "created_at": m.created_at, **({"tool": m.tool} if m.tool else {})}
                     for m in messages],
        **({"images": images} if images else {}),
    }, ensure_ascii=False, indent=1)


def check_size(size: int) -> None:
    """Refuse a chat file too large to read (before it is read)."""
    if size > MAX_BYTES:
        fail(f"The file is {size / 2**20:.0f} MiB; a chat file is at most "
             f"{MAX_BYTES >> 20} MiB.")


def parse_chat(data: bytes) -> dict[str, Any]:
    """A checked chat from a file's bytes: title, system_prompt, params and
    messages (id, parent, role, content, reasoning, complete, stats) in an
    order where every parent comes first; raises ImportError_ saying why not."""
    doc = _chat_document(data)
    tree = doc.get("format") == FORMAT
    images, notes = _images(doc.get("images")) if tree else ({}, [])
    messages, seen = [], set()
    names: dict[str, str] = {}  # a plain list's call ids -> their tools' names
    lost: list[str] = []  # a plain list's images that could not be read
    for i, m in enumerate(doc["messages"], start=1):
        if not tree and isinstance(m, dict) and isinstance(m.get("content"), list):
            m = openai_parts(m, i, images, lost)
        messages.append(_message(m, i, tree, seen, names, images))
        seen.add(messages[-1]["id"])
    if lost:
        notes.append(f"{len(lost)} of the file's images could not be read and were left out "
                     f"({'; '.join(lost[:3])}{'; ...' if len(lost) > 3 else ''}).")
    if not messages:
        fail("The file has no messages.")
    title = doc.get("title")
    system = doc.get("system_prompt", "")
    leaf = doc.get("leaf")
    chat = {"title": title[:200] if isinstance(title, str) and title.strip() else
            "Imported chat",
            "system_prompt": system if isinstance(system, str) else "",
            "params": _params(doc.get("params")),
            "leaf": leaf if is_int(leaf) and leaf in seen else messages[-1]["id"],
            "messages": messages, "notes": notes,
            "images": list({image.digest: image for image in images.values()}.values())}
    try:  # the rest of the text written: SQLite refuses lone surrogates
        json.dumps([chat["title"], chat["system_prompt"], chat["params"],
                    [(m["stats"], m["tool"]) for m in messages]],
                   ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        fail("The file's title, system prompt, settings, stats or tool calls hold text "
             "that is not valid Unicode.")
    return chat


def _chat_document(data: bytes) -> dict[str, Any]:
    """The file's JSON as a chat document: a dict with a bounded list of
    `messages` (a bare list is one), of a format and version this reads."""
    check_size(len(data))
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        fail("The file is not UTF-8 text.")
    except (json.JSONDecodeError, RecursionError) as e:
        fail(f"The file is not valid JSON ({getattr(e, 'msg', 'too deeply nested')}).")
    except ValueError:  # Python's guard against quadratic int(str) on huge numbers
        fail(f"The file holds a number of more than {sys.get_int_max_str_digits():,} digits.")
    if isinstance(doc, list):
        doc = {"messages": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
        fail("The file has no list of messages (a Tandem chat export, or "
             '{"messages": [{"role": ..., "content": ...}]}).')
    if doc.get("format") not in (None, FORMAT):
        fail(f"The file's format is {str(doc.get('format'))[:40]!r}, not a Tandem chat.")
    if doc.get("format") == FORMAT and doc.get("version") != VERSION:
        fail(f"The file is a Tandem chat of version {str(doc.get('version'))[:20]}; "
             f"this Tandem reads version {VERSION}.")
    if len(doc["messages"]) > MAX_MESSAGES:
        fail(f"The file has {len(doc['messages']):,} messages; at most {MAX_MESSAGES:,} "
             "are imported.")
    return doc


def _images(raw: Any) -> tuple[dict[str, Any], list[str]]:
    """A Tandem export's images ({digest, format, data: base64}), each read
    and checked as an attached one is (app/conversation/chat_images.py): the
    file's digest -> its ImageFile (whose digest is computed again). One
    that cannot be read is left out, its messages without it, and said."""
    if raw is None:
        return {}, []
    if not isinstance(raw, list) or len(raw) > MAX_FILE_IMAGES:
        fail(f"The file's images are not a list of at most {MAX_FILE_IMAGES}.")
    images, lost = {}, []
    for n, item in enumerate(raw, start=1):
        digest = item.get("digest") if isinstance(item, dict) else None
        payload = item.get("data") if isinstance(item, dict) else None
        if not isinstance(digest, str) or not isinstance(payload, str):
            lost.append(f"image {n}: no digest or data")
            continue
        image = read_base64(f"image {n}", f"image {n}", payload, lost)
        if image is not None:
            images[digest[:64]] = image
    notes = [f"{len(lost)} of the file's images could not be read and were left out "
             f"({'; '.join(lost[:3])[:300]})."] if lost else []
    return images, notes


def _message(m: Any, i: int, tree: bool, seen: set, names: dict[str, str],
             images: dict[str, Any] | None = None) -> dict[str, Any]:
    """Message `i` of the file, checked: in a Tandem export (`tree`) its own
    id and a parent among the ids `seen` before it; in a plain list it
    follows the message before (an OpenAI-style list's tool calls and tool
    results become Tandem's tool turns)."""
    if not isinstance(m, dict):
        fail(f"Message {i} is not an object.")
    role, content = m.get("role"), m.get("content")
    if role not in ROLES:
        fail(f"Message {i} has the role {str(role)[:20]!r}; only user, assistant, "
             "system and tool are imported.")
    tool = _tool(m.get("tool"), role, i) if tree else openai_tool(m, role, i, names)
    if content is None and role == "assistant" and tool:
        content = ""  # OpenAI: an answer that only called tools
    if not isinstance(content, str):
        fail(f"Message {i} has no text content.")
    reasoning = m.get("reasoning", "") if tree else (m.get("reasoning_content") or "")
    if not isinstance(reasoning, str):
        fail(f"Message {i}'s thinking is not text.")
    stats = _stats(m.get("stats"), len(content), images or {}) if tree else \
        ({"images": m["_images"]} if m.get("_images") else None)  # _openai_parts' own
    if tree:
        mid, parent = m.get("id"), m.get("parent")
        if not is_int(mid) or mid in seen:
            fail(f"Message {i} has no id of its own.")
        if parent is not None and not (is_int(parent) and parent in seen):
            fail(f"Message {i} follows a message that is not before it in the file.")
    else:  # a plain list is one branch
        mid, parent = i, (i - 1 if i > 1 else None)
    for text in (content, reasoning):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            fail(f"Message {i} holds text that is not valid Unicode.")
    return {"id": mid, "parent": parent, "role": role, "content": content,
            "reasoning": reasoning, "complete": m.get("complete", True) is not False,
            "stats": stats, "tool": tool}


def _tool(raw: Any, role: str, i: int) -> dict[str, Any] | None:
    """A Tandem export's tool field, checked: an answer's calls, or a tool
    result's call and outcome. Elsewhere it is left out."""
    if raw is None:
        if role == "tool":
            fail(f"Message {i} is a tool result without its call.")
        return None
    if not isinstance(raw, dict):
        fail(f"Message {i}'s tool field is not an object.")
    if role == "assistant":
        calls = raw.get("calls")
        if not isinstance(calls, list) or len(calls) > MAX_CALLS:
            fail(f"Message {i}'s tool calls are not a list of at most {MAX_CALLS}.")
        return {"calls": [tool_call(c, i) for c in calls]} if calls else None
    if role != "tool":
        return None
    call = tool_call(raw, i)
    status = raw.get("status")
    call["status"] = status if status in STATUSES else "result"
    call["error"] = raw.get("error") is True
    return call


def _params(raw: Any) -> dict:
    """The chat's settings, each held to what the settings row can show; an
    unknown key is left out (a newer Tandem's), a known one out of range
    refuses the file."""
    if not isinstance(raw, dict):
        return {}
    params: dict[str, Any] = {}
    for key, (kind, low, high) in PARAMS.items():
        if key not in raw:
            continue
        value = raw[key]
        number = is_int(value) or (kind is float and isinstance(value, float))
        if not (number and low <= value <= high):  # NaN compares false: refused too
            fail(f"The chat's setting {key} is {str(value)[:24]}; it is "
                 f"{'an integer' if kind is int else 'a number'} from {low} to {high}.")
        params[key] = kind(value)
    fmt = raw.get("answer_format")  # JSON answers (app/chat/chat_settings.py)
    if isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema") and \
            isinstance(fmt.get("schema", ""), str) and len(fmt.get("schema", "")) <= 256 * 1024:
        params["answer_format"] = {k: fmt[k] for k in ("type", "schema") if k in fmt}
    # The chat's Drafts setting: "off" travels; a draft model does not (a file
    # must never name a path this app then loads: the library's models only).
    if raw.get("drafts") == "off":
        params["drafts"] = "off"
    return params


def _stats(raw: Any, length: int, images: dict[str, Any]) -> dict | None:
    """An answer's stats as the app writes them, each field checked: what does
    not fit is left out (a file cannot put a non-number where one is read)."""
    if not isinstance(raw, dict):
        return None
    out: dict[str, Any] = {}
    for key in ("footer", "reason"):
        if isinstance(raw.get(key), str):
            out[key] = raw[key][:1000]
    for key in ("output_tokens", "prompt_tokens", "cached_tokens"):
        value = raw.get(key)
        if is_int(value) and 0 <= value < 1 << 31:
            out[key] = value
    for key in ("ttft_s", "thinking_s"):
        value = raw.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and \
                0 <= value < 1e7:
            out[key] = float(value)
    files = raw.get("attachments")
    if isinstance(files, list):
        kept = [f for f in (file_record(f, length) for f in files[:100]) if f is not None]
        if kept:
            out["attachments"] = kept
    pictures = raw.get("images")  # records of the images the file carries
    if isinstance(pictures, list):
        kept = []
        for record in (image_record(r) for r in pictures[:100]):
            image = images.get(record["digest"]) if record else None
            if image is not None:  # as the image is, under its computed digest
                kept.append(image.record() | {"name": record["name"]})
        if kept:
            out["images"] = kept
    lanes = raw.get("lanes")
    if isinstance(lanes, list) and all(isinstance(p, list) and len(p) == 2 and
                                       all(isinstance(x, str) for x in p) for p in lanes):
        out["lanes"] = lanes[:64]
    return out or None


def import_chat(store, data: bytes) -> int:
    """A new chat from a file's bytes (parse_chat's checks), written in one
    transaction; returns its id."""
    return write_chat(store, parse_chat(data))


def write_chat(store, parsed: dict[str, Any]) -> int:
    """A new chat from parse_chat's checked chat; returns its id."""
    chat = store.create_chat(parsed["title"], system_prompt=parsed["system_prompt"],
                             params=parsed["params"])
    store.add_tree(chat.id, parsed["messages"], parsed["leaf"], parsed.get("images"))
    return chat.id
