"""A chat as JSON, out and back in: every branch, the thinking, the stats.

Qt-free. Export writes the whole tree (`format: tandem-chat`, `version: 1`).
Import reads that, or a plain OpenAI-style `{"messages": [{"role",
"content"}, ...]}` / a bare list of such messages (one branch), checks every
field before anything is written, and makes a new chat: a file is data, its
ids are renumbered, nothing in it can touch another chat.
"""

from __future__ import annotations

import json
from typing import Any

FORMAT, VERSION = "tandem-chat", 1
MAX_BYTES = 64 << 20  # a chat file larger than this is refused before it is read
MAX_MESSAGES = 100_000
ROLES = ("user", "assistant", "system")
PARAM_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_tokens")


class ImportError_(ValueError):
    """A file that is not a chat Tandem can import; the message says why."""


def export_chat(store, chat_id: int) -> str:
    chat = store.chat(chat_id)
    messages = store.all_messages(chat_id)
    return json.dumps({
        "format": FORMAT, "version": VERSION, "title": chat.title,
        "system_prompt": chat.system_prompt, "params": chat.params,
        "created_at": chat.created_at, "leaf": store.leaf(chat_id),
        "messages": [{"id": m.id, "parent": m.parent_id, "role": m.role, "content": m.content,
                      "reasoning": m.reasoning, "complete": m.complete, "stats": m.stats,
                      "created_at": m.created_at} for m in messages],
    }, ensure_ascii=False, indent=1)


def _fail(why: str):
    raise ImportError_(why)


def check_size(size: int) -> None:
    """Refuse a chat file too large to read (before it is read)."""
    if size > MAX_BYTES:
        _fail(f"The file is {size / 2**20:.0f} MiB; a chat file is at most "
              f"{MAX_BYTES >> 20} MiB.")


def parse_chat(data: bytes) -> dict[str, Any]:
    """A checked chat from a file's bytes: title, system_prompt, params and
    messages (id, parent, role, content, reasoning, complete, stats) in an
    order where every parent comes first; raises ImportError_ saying why not."""
    check_size(len(data))
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        _fail("The file is not UTF-8 text.")
    except (json.JSONDecodeError, RecursionError) as e:
        _fail(f"The file is not valid JSON ({getattr(e, 'msg', 'too deeply nested')}).")
    if isinstance(doc, list):
        doc = {"messages": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
        _fail("The file has no list of messages (a Tandem chat export, or "
              '{"messages": [{"role": ..., "content": ...}]}).')
    if doc.get("format") not in (None, FORMAT):
        _fail(f"The file's format is {str(doc.get('format'))[:40]!r}, not a Tandem chat.")
    if doc.get("format") == FORMAT and doc.get("version") != VERSION:
        _fail(f"The file is a Tandem chat of version {str(doc.get('version'))[:20]}; "
              f"this Tandem reads version {VERSION}.")
    raw = doc["messages"]
    if len(raw) > MAX_MESSAGES:
        _fail(f"The file has {len(raw):,} messages; at most {MAX_MESSAGES:,} are imported.")
    tree = doc.get("format") == FORMAT
    messages, seen = [], set()
    for i, m in enumerate(raw, start=1):
        if not isinstance(m, dict):
            _fail(f"Message {i} is not an object.")
        role, content = m.get("role"), m.get("content")
        if role not in ROLES:
            _fail(f"Message {i} has the role {str(role)[:20]!r}; only user, assistant and "
                  "system are imported.")
        if not isinstance(content, str):
            _fail(f"Message {i} has no text content.")
        reasoning = m.get("reasoning", "") if tree else (m.get("reasoning_content") or "")
        if not isinstance(reasoning, str):
            _fail(f"Message {i}'s thinking is not text.")
        stats = _stats(m.get("stats")) if tree else None
        if tree:
            mid, parent = m.get("id"), m.get("parent")
            if not isinstance(mid, int) or isinstance(mid, bool) or mid in seen:
                _fail(f"Message {i} has no id of its own.")
            if parent is not None and parent not in seen:
                _fail(f"Message {i} follows a message that is not before it in the file.")
        else:  # a plain list is one branch
            mid, parent = i, (i - 1 if i > 1 else None)
        seen.add(mid)
        for text in (content, reasoning):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                _fail(f"Message {i} holds text that is not valid Unicode.")
        messages.append({"id": mid, "parent": parent, "role": role, "content": content,
                         "reasoning": reasoning, "complete": m.get("complete", True) is not False,
                         "stats": stats})
    if not messages:
        _fail("The file has no messages.")
    title = doc.get("title")
    system = doc.get("system_prompt", "")
    params = doc.get("params", {})
    leaf = doc.get("leaf")
    return {"title": title[:200] if isinstance(title, str) and title.strip() else
            "Imported chat",
            "system_prompt": system if isinstance(system, str) else "",
            "params": params if isinstance(params, dict) else {},
            "leaf": leaf if leaf in seen else messages[-1]["id"],
            "messages": messages}


def _stats(raw: Any) -> dict | None:
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
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31:
            out[key] = value
    for key in ("ttft_s", "thinking_s"):
        value = raw.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and \
                0 <= value < 1e7:
            out[key] = float(value)
    files = raw.get("attachments")
    if isinstance(files, list):
        kept = [{"name": f["name"][:255], "size": f["size"], "tokens": f.get("tokens"),
                 "start": f["start"], "end": f["end"]} for f in files[:100]
                if isinstance(f, dict) and isinstance(f.get("name"), str)
                and all(isinstance(f.get(k), int) and not isinstance(f.get(k), bool)
                        and f[k] >= 0 for k in ("size", "start", "end"))
                and f["start"] <= f["end"]
                and (f.get("tokens") is None or isinstance(f.get("tokens"), int))]
        if kept:
            out["attachments"] = kept
    lanes = raw.get("lanes")
    if isinstance(lanes, list) and all(isinstance(p, list) and len(p) == 2 and
                                       all(isinstance(x, str) for x in p) for p in lanes):
        out["lanes"] = lanes[:64]
    return out or None


def import_chat(store, data: bytes) -> int:
    """A new chat from a file's bytes (parse_chat's checks), written in one
    transaction; returns its id."""
    parsed = parse_chat(data)
    params = {k: v for k, v in parsed["params"].items()
              if k in PARAM_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool)}
    fmt = parsed["params"].get("answer_format")  # JSON answers (app/chat_settings.py)
    if isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema") and \
            isinstance(fmt.get("schema", ""), str) and len(fmt.get("schema", "")) <= 256 * 1024:
        params["answer_format"] = {k: fmt[k] for k in ("type", "schema") if k in fmt}
    chat = store.create_chat(parsed["title"], system_prompt=parsed["system_prompt"],
                             params=params)
    store.add_tree(chat.id, parsed["messages"], parsed["leaf"])
    return chat.id
