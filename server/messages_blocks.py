"""A /v1/messages turn's content blocks as the chat messages the engine
renders: a user turn's text, images and `tool_result` blocks (each must
answer a tool_use made before it; `tool_reference` blocks inside one load
deferred tools), an assistant turn's text and `tool_use` blocks (`thinking`
blocks of earlier turns left out of the prompt, as chat templates drop
earlier thinking). Keys a block carries besides those read here
(cache_control, citations, caller) change nothing and are ignored."""

from __future__ import annotations

from engine import EngineError

from .bodies import _is_text
from .errors import APIError
from .image_urls import RequestImages


def text_blocks(field: str, blocks) -> str:
    if not isinstance(blocks, list):
        raise APIError(400, f"{field} must be text or a list of text blocks.", param=field)
    out = []
    for j, block in enumerate(blocks):
        if not (isinstance(block, dict) and block.get("type") == "text"
                and isinstance(block.get("text"), str)):
            raise APIError(400, f"{field}[{j}] must be a text block.", param=f"{field}[{j}]")
        out.append(block["text"])
    return "".join(out)


def assistant_turn(field: str, blocks: list, called: set[str]) -> list[dict]:
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


def _tool_result_text(where: str, content, loaded: set[str]) -> str:
    """A tool_result's content as text: a string, or text blocks; each
    `tool_reference` block among them loads the tool it names (a deferred
    tool, `defer_loading`) and adds no text."""
    if not isinstance(content, list):
        return content
    texts = []
    for k, block in enumerate(content):
        if isinstance(block, dict) and block.get("type") == "tool_reference":
            name = block.get("tool_name")
            if not isinstance(name, str) or not name:
                raise APIError(400, f"{where}.content[{k}]: a tool_reference block needs a "
                                    "tool_name.", param=f"{where}.content[{k}]")
            loaded.add(name)
        else:
            texts.append(block)
    return text_blocks(f"{where}.content", texts)


def user_turn(field: str, blocks: list, called: set[str], loaded: set[str],
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
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str) or call_id not in called:
                raise APIError(400, f"{where}: unexpected tool_use_id found in tool_result "
                                    f"blocks: {call_id}. Each tool_result block must have a "
                                    "corresponding tool_use block before it.", param=where)
            content = _tool_result_text(where, block.get("content", ""), loaded)
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


def folded(messages: list[dict]) -> list[dict]:
    """`messages` for a template that takes a system message only first:
    each later one folded into the user (or tool result) turn before it as
    <system-reminder> text (Claude Code's own fallback does the same), or,
    after an assistant turn, into the next user turn; a last one with no
    user turn left becomes one."""
    out: list[dict] = []
    pending: list[str] = []
    for i, m in enumerate(messages):
        if m["role"] == "system" and i > 0:
            text = _reminder(m["content"])
            if out and out[-1]["role"] in ("user", "tool"):
                out[-1] = _joined(out[-1], text, after=True)
            else:
                pending.append(text)
            continue
        if pending and m["role"] in ("user", "tool"):
            m = _joined(m, "\n\n".join(pending), after=False)
            pending = []
        out.append(m)
    if pending:
        out.append({"role": "user", "content": "\n\n".join(pending)})
    return out


def _reminder(text: str) -> str:
    if text.lstrip().startswith("<system-reminder>"):
        return text
    return f"<system-reminder>\n{text}\n</system-reminder>"


def _joined(message: dict, text: str, after: bool) -> dict:
    """`message` with `text` after (or before) its own, a blank line between."""
    own = message["content"]
    joined = (own + "\n\n" + text if after else text + "\n\n" + own) if own else text
    out = {**message, "content": joined}
    if "parts" in message:  # a vision turn: its parts in order, the text among them
        part = {"type": "text", "text": ("\n\n" + text) if after else (text + "\n\n")}
        out["parts"] = message["parts"] + [part] if after else [part] + message["parts"]
    return out
