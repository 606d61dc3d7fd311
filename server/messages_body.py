"""A /v1/messages body (Anthropic's Messages API), validated whole and turned
into the chat request the engine runs: `system` (text or text blocks), user
and assistant turns of text, `tool_use` (an assistant's calls) and
`tool_result` blocks (each must answer a tool_use made before it),
`thinking` blocks of earlier turns (left out of the prompt, as chat
templates drop earlier thinking), `tools` with `input_schema`,
`tool_choice` (auto, any, tool, none), `max_tokens` (required),
`stop_sequences`, temperature / top_p / top_k. Accepted and ignored:
metadata, service_tier, `thinking` (a model thinks or not by its template:
its thinking comes back as thinking blocks). Image blocks: base64, and url
sources under --allow-image-urls (image_urls.py). Documents and server tools
are refused by name."""

from __future__ import annotations

import json

from engine import EngineError, strict_loads

from .bodies import Completion, _is_text, _optional, _params, _tools
from .errors import APIError
from .image_urls import ImageFetcher, RequestImages

FIELDS = {"model", "messages", "system", "max_tokens", "stop_sequences", "stream",
          "temperature", "top_p", "top_k", "metadata", "tools", "tool_choice", "thinking",
          "service_tier"}
MAX_MESSAGES = 4096


def parse(body: dict, defaults: dict, fetcher: ImageFetcher | None = None) -> Completion:
    for name in body:
        if name not in FIELDS:
            raise APIError(400, f"{name}: Extra inputs are not permitted", param=name)
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise APIError(400, "max_tokens: Field required (an integer >= 1).", param="max_tokens")
    thinking = _optional(body, "thinking", dict, {})
    if thinking.get("type") not in (None, "enabled", "disabled", "adaptive"):
        raise APIError(400, "thinking.type must be enabled or disabled.", param="thinking")
    messages = _system(body.get("system")) + _messages(body.get("messages"), fetcher)
    chat = {"max_tokens": max_tokens, "stop": body.get("stop_sequences") or None}
    for name in ("temperature", "top_p", "top_k"):
        if body.get(name) is not None:
            chat[name] = body[name]
    params = _params({k: v for k, v in chat.items() if v is not None}, defaults)
    tools, tool_choice = _tools({"tools": _function_tools(body.get("tools")),
                                 "tool_choice": _tool_choice(body.get("tool_choice"))})
    return Completion(True, messages, None, params, _optional(body, "model", str, None),
                      _optional(body, "stream", bool, False), False, None, tools, tool_choice)


def _system(system) -> list[dict]:
    if system is None or system == "":
        return []
    text = system if isinstance(system, str) else _text_blocks("system", system)
    if not isinstance(text, str) or not _is_text(text):
        raise APIError(400, "system must be text or a list of text blocks.", param="system")
    return [{"role": "system", "content": text}]


def _text_blocks(field: str, blocks) -> str:
    if not isinstance(blocks, list):
        raise APIError(400, f"{field} must be text or a list of text blocks.", param=field)
    out = []
    for j, block in enumerate(blocks):
        if not (isinstance(block, dict) and block.get("type") == "text"
                and isinstance(block.get("text"), str)):
            raise APIError(400, f"{field}[{j}] must be a text block.", param=f"{field}[{j}]")
        out.append(block["text"])
    return "".join(out)


def _messages(messages, fetcher: ImageFetcher | None = None) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise APIError(400, "messages: a non-empty list is required.", param="messages")
    if len(messages) > MAX_MESSAGES:
        raise APIError(400, f"messages: more than {MAX_MESSAGES}.", param="messages")
    out: list[dict] = []
    called: set[str] = set()
    images = RequestImages(fetcher)  # the request's images together
    for i, m in enumerate(messages):
        field = f"messages[{i}]"
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("user", "assistant"):
            raise APIError(400, f"{field}.role must be user or assistant.",
                           param=f"{field}.role")
        content = m.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            raise APIError(400, f"{field}.content must be text or a list of blocks.",
                           param=f"{field}.content")
        out += (_assistant(field, content, called) if role == "assistant"
                else _user(field, content, called, images))
    return out


def _assistant(field: str, blocks: list, called: set[str]) -> list[dict]:
    text, calls = [], []
    for j, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        where = f"{field}.content[{j}]"
        if kind == "text" and isinstance(block.get("text"), str) and _is_text(block["text"]):
            text.append(block["text"])
        elif kind == "tool_use":
            call_id, name, args = block.get("id"), block.get("name"), block.get("input", {})
            if not (isinstance(call_id, str) and call_id and isinstance(name, str) and name
                    and isinstance(args, dict)):
                raise APIError(400, f"{where}: a tool_use block needs an id, a name and an "
                                    "input object.", param=where)
            called.add(call_id)
            calls.append({"id": call_id, "type": "function",
                          "function": {"name": name, "arguments": args}})
        elif kind in ("thinking", "redacted_thinking"):
            continue
        else:
            raise APIError(400, f"{where}: an assistant turn holds text, tool_use and thinking "
                                f"blocks, not {kind!r}.", param=where)
    turn = {"role": "assistant", "content": "".join(text)}
    if calls:
        turn["tool_calls"] = calls
    return [turn]


def _image(where: str, block: dict, request_images: RequestImages):
    """An image block ({"source": {"type": "base64", "media_type", "data"}}),
    decoded and checked (engine/images.py); a URL source ({"type": "url",
    "url": ...}) is fetched only under --allow-image-urls (image_urls.py)."""
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    try:
        if kind == "url":
            url = source.get("url")
            if not isinstance(url, str) or not url[:8].lower().startswith(("http://",
                                                                            "https://")):
                raise EngineError("A url image source needs an http(s) url.", "bad-argument")
            return request_images.url(url, f"The image in {where}")
        media, data = (source.get("media_type"), source.get("data")) if kind == "base64" \
            else (None, None)
        if not (isinstance(media, str) and isinstance(data, str)):
            raise EngineError("An image block needs a source {'type': 'base64', "
                              "'media_type': 'image/png', 'data': ...}.", "bad-argument")
        if not media.lower().startswith("image/"):
            raise EngineError(f"An image block's media_type is {media[:40]!r}, not an image.",
                              "bad-argument")
        return request_images.base64(data, f"The image in {where}")
    except EngineError as e:
        raise APIError(400, f"{where}: {e}", param=where) from None


def _user(field: str, blocks: list, called: set[str],
          request_images: RequestImages | None = None) -> list[dict]:
    results, text, images, order = [], [], [], []
    for j, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        where = f"{field}.content[{j}]"
        if kind == "text" and isinstance(block.get("text"), str) and _is_text(block["text"]):
            text.append(block["text"])
            order.append({"type": "text", "text": block["text"]})
        elif kind == "image":
            images.append(_image(where, block, request_images or RequestImages()))
            order.append({"type": "image", "index": len(images) - 1})
        elif kind == "tool_result":
            call_id, content = block.get("tool_use_id"), block.get("content", "")
            if not isinstance(call_id, str) or call_id not in called:
                raise APIError(400, f"{where}: unexpected tool_use_id found in tool_result "
                                    f"blocks: {call_id}. Each tool_result block must have a "
                                    "corresponding tool_use block before it.", param=where)
            if isinstance(content, list):
                content = _text_blocks(f"{where}.content", content)
            if not isinstance(content, str) or not _is_text(content):
                raise APIError(400, f"{where}.content must be text.", param=where)
            if block.get("is_error"):
                content = f"Error: {content}"
            results.append({"role": "tool", "tool_call_id": call_id, "content": content})
        elif kind in ("document", "search_result"):
            raise APIError(400, f"{where}: {kind} blocks are not supported.", param=where)
        else:
            raise APIError(400, f"{where}: a user turn holds text and tool_result blocks, not "
                                f"{kind!r}.", param=where)
    turn = {"role": "user", "content": "".join(text)}
    if images:  # read by a vision model only (the engine's capabilities.images)
        turn["images"], turn["parts"] = images, order
    return results + ([turn] if text or images or not results else [])


def _function_tools(tools):
    if tools in (None, []):
        return None
    if not isinstance(tools, list):
        raise APIError(400, "tools must be a list.", param="tools")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") not in (None, "custom"):
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise APIError(400, f"tools[{i}]: server tools ({kind!r}) are not supported; "
                                "this server runs client tools (name, input_schema) only.",
                           param=f"tools[{i}]")
        function = {"name": tool.get("name"),
                    "parameters": tool.get("input_schema") or {"type": "object"}}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice):
    if choice is None:
        return None
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}
    mapped = {"auto": "auto", "any": "required", "none": "none"}.get(kind)
    if mapped is None:
        raise APIError(400, "tool_choice.type must be auto, any, tool or none.",
                       param="tool_choice")
    return mapped


def tool_input(arguments: str) -> dict:
    """A call's arguments (a JSON string) as a tool_use block's input object
    (`_raw`: arguments that are not JSON, or hold a number out of range)."""
    try:
        value = strict_loads(arguments) if arguments else {}
    except ValueError:
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"value": value}
