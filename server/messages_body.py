"""A /v1/messages body (Anthropic's Messages API), validated whole and turned
into the chat request the engine runs. What each field does here is the
README's table (Anthropic compatibility), kept equal to FIELDS by a test: a
field a new client sends is added on purpose. Unknown fields, at the top and
inside the objects read here (metadata, thinking, output_config,
context_management), are named all at once in one 400.

`system` (text or text blocks) and `system` messages inside `messages`
(kept at their place; one a template refuses there is folded into a user
turn: messages_blocks.folded); user and assistant turns (messages_blocks.py);
`tools` with `input_schema` (`defer_loading` ones offered once a
tool_reference loads them), `tool_choice`, `max_tokens` (required, but not
to count tokens), `stop_sequences`, temperature / top_p / top_k;
`output_config.format` (or `output_format`) as a grammar; `thinking.display`
"omitted" leaves thinking text out of the answer. Accepted and ignored:
bookkeeping, `effort`, `context_management`'s clear edits (see the table)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from engine import EngineError, Grammar, strict_loads

from .bodies import Completion, _is_text, _optional, _params, _tools
from .errors import APIError
from .overflow import policy_of
from .image_urls import ImageFetcher, RequestImages
from .messages_blocks import assistant_turn, folded, text_blocks, user_turn

FIELDS = {"model", "messages", "system", "max_tokens", "stop_sequences", "stream",
          "context_overflow",
          "temperature", "top_p", "top_k", "metadata", "tools", "tool_choice", "thinking",
          "service_tier", "context_management", "output_config", "output_format",
          "cache_control", "speed", "inference_geo", "diagnostics", "user_profile_id",
          "workspace_id"}
INNER_FIELDS = {  # the objects read here, and the keys each may hold
    "metadata": {"user_id"}, "thinking": {"type", "budget_tokens", "display"},
    "output_config": {"effort", "format", "task_budget"}, "context_management": {"edits"}}
SYSTEM_MESSAGE_FIELDS = {"role", "content", "clear_at", "output_config"}
EDITS = {"clear_thinking_20251015", "clear_tool_uses_20250919"}  # accepted, ignored
EFFORTS = (None, "low", "medium", "high", "xhigh", "max")
MAX_MESSAGES = 4096


@dataclass(frozen=True, slots=True)
class MessagesJob(Completion):
    """A Completion and what only the Messages dialect asks of the answer."""

    show_thinking: bool = True  # thinking.display "omitted": thinking blocks come empty


def parse(body: dict, defaults: dict, fetcher: ImageFetcher | None = None,
          counting: bool = False) -> MessagesJob:
    """The request's parts, validated; `counting`: for count_tokens, where
    max_tokens may be left out."""
    _known_fields(body)
    max_tokens = body.get("max_tokens", 1 if counting else None)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise APIError(400, "max_tokens: Field required (an integer >= 1).", param="max_tokens")
    _optional(body, "metadata", dict, {})
    _optional(body.get("metadata") or {}, "user_id", str, None, "metadata")
    show_thinking = _thinking(body.get("thinking"))
    _context_management(body.get("context_management"))
    grammar = _output_format(body)
    loaded: set[str] = set()  # deferred tools a tool_reference has loaded
    chat, leading = _messages(body.get("messages"), loaded, fetcher)
    messages = _system(body.get("system"), leading) + chat
    params = {"max_tokens": max_tokens, "stop": body.get("stop_sequences") or None}
    for name in ("temperature", "top_p", "top_k"):
        if body.get(name) is not None:
            params[name] = body[name]
    sampling = _params({k: v for k, v in params.items() if v is not None}, defaults)
    if grammar is not None:
        sampling = replace(sampling, grammar=grammar)
    tools, tool_choice = _tools({"tools": _function_tools(body.get("tools"), loaded),
                                 "tool_choice": _tool_choice(body.get("tool_choice"))})
    mid_system = any(m["role"] == "system" for m in messages[1:])
    return MessagesJob(True, messages, None, sampling, _optional(body, "model", str, None),
                       _optional(body, "stream", bool, False), False, None, tools,
                       tool_choice, folded(messages) if mid_system else None,
                       context_overflow=policy_of(body), show_thinking=show_thinking)


def _known_fields(body: dict) -> None:
    """Every field the body and its objects hold is one this server knows;
    else one 400 naming each that is not."""
    unknown = [name for name in body if name not in FIELDS]
    for name, allowed in INNER_FIELDS.items():
        if isinstance(body.get(name), dict):
            unknown += [f"{name}.{key}" for key in body[name] if key not in allowed]
    if unknown:
        shown = ", ".join(str(name)[:100] for name in unknown[:20])
        more = f" (and {len(unknown) - 20} more)" if len(unknown) > 20 else ""
        raise APIError(400, f"{shown}{more}: Extra inputs are not permitted.",
                       param=str(unknown[0])[:100])


def _thinking(thinking) -> bool:
    """`thinking` checked; False where its display is "omitted". A model
    thinks or not by its template: the type and budget change nothing."""
    if thinking is None:
        return True
    if not isinstance(thinking, dict) or thinking.get("type") not in (
            "enabled", "disabled", "adaptive", "between_tools"):
        raise APIError(400, "thinking.type must be enabled, disabled, adaptive or "
                            "between_tools.", param="thinking.type")
    _optional(thinking, "budget_tokens", int, None, "thinking")
    if thinking.get("display") not in (None, "summarized", "omitted"):
        raise APIError(400, "thinking.display must be summarized or omitted.",
                       param="thinking.display")
    return thinking.get("display") != "omitted"


def _context_management(value) -> None:
    """Its edits checked: the clear edits are accepted and change nothing
    here (README: Anthropic compatibility); compaction is refused by name."""
    if value is None:
        return
    edits = value.get("edits", []) if isinstance(value, dict) else None
    if not isinstance(edits, list):
        raise APIError(400, "context_management must be {'edits': [...]}.",
                       param="context_management")
    for i, edit in enumerate(edits):
        kind = edit.get("type") if isinstance(edit, dict) else None
        if kind not in EDITS:
            raise APIError(400, f"context_management.edits[{i}]: {str(kind)[:60]!r} is not "
                                f"supported (this server accepts {', '.join(sorted(EDITS))}).",
                           param=f"context_management.edits[{i}]")


def _output_format(body: dict) -> Grammar | None:
    """output_config (effort checked and ignored; format honoured) and the
    older top-level output_format: a json_schema format as a grammar."""
    config = _optional(body, "output_config", dict, {})
    if config.get("effort") not in EFFORTS:
        raise APIError(400, "output_config.effort must be low, medium, high, xhigh or max.",
                       param="output_config.effort")
    _optional(config, "task_budget", dict, None, "output_config")
    formats = [(name, value) for name, value in (("output_config.format", config.get("format")),
                                                  ("output_format", body.get("output_format")))
               if value is not None]
    if len(formats) > 1 and formats[0][1] != formats[1][1]:
        raise APIError(400, "output_config.format and output_format differ; send one.",
                       param="output_format")
    if not formats:
        return None
    name, value = formats[0]
    schema = value.get("schema") if isinstance(value, dict) else None
    if not (isinstance(value, dict) and value.get("type") == "json_schema"
            and isinstance(schema, dict)):
        raise APIError(400, f"{name} must be {{'type': 'json_schema', 'schema': {{...}}}}.",
                       param=name)
    try:
        return Grammar("json_schema", json.dumps(schema))
    except EngineError as e:
        raise APIError(400, f"{name}: {e}", param=name) from None


def _system(system, leading: list[str]) -> list[dict]:
    """The system prompt: `system`, then any system messages `messages`
    began with (Anthropic wants those at the top; here they join it)."""
    texts = [] if system is None or system == "" else [
        system if isinstance(system, str) else text_blocks("system", system)]
    if texts and (not isinstance(texts[0], str) or not _is_text(texts[0])):
        raise APIError(400, "system must be text or a list of text blocks.", param="system")
    texts += leading
    return [{"role": "system", "content": "\n\n".join(texts)}] if texts else []


def _system_message(field: str, m: dict, later_user: bool) -> str | None:
    """A system message inside `messages` (the mid-conversation-system beta):
    its text, or None where `clear_at` has it no longer shown."""
    extra = [key for key in m if key not in SYSTEM_MESSAGE_FIELDS]
    if extra:
        raise APIError(400, f"{', '.join(f'{field}.{k}'[:100] for k in extra)}: Extra inputs "
                            "are not permitted.", param=f"{field}.{extra[0]}"[:100])
    if m.get("clear_at") not in (None, "never", "next_user_message"):
        raise APIError(400, f"{field}.clear_at must be next_user_message or never.",
                       param=f"{field}.clear_at")
    config = _optional(m, "output_config", dict, {}, field)
    if config.get("effort") not in EFFORTS or set(config) - {"effort"}:
        raise APIError(400, f"{field}.output_config holds only an effort (low, medium, high, "
                            "xhigh or max).", param=f"{field}.output_config")
    content = m.get("content", "")
    text = content if isinstance(content, str) else text_blocks(f"{field}.content", content)
    if not _is_text(text):
        raise APIError(400, f"{field}.content must be text.", param=f"{field}.content")
    if m.get("clear_at") == "next_user_message" and later_user:
        return None
    return text


def _messages(messages, loaded: set[str],
              fetcher: ImageFetcher | None = None) -> tuple[list[dict], list[str]]:
    """The chat messages, and the texts of system messages it began with."""
    if not isinstance(messages, list) or not messages:
        raise APIError(400, "messages: a non-empty list is required.", param="messages")
    if len(messages) > MAX_MESSAGES:
        raise APIError(400, f"messages: more than {MAX_MESSAGES}.", param="messages")
    out: list[dict] = []
    leading: list[str] = []
    called: set[str] = set()
    images = RequestImages(fetcher)  # the request's images together
    last_user = max((i for i, m in enumerate(messages)
                     if isinstance(m, dict) and m.get("role") == "user"), default=-1)
    for i, m in enumerate(messages):
        field = f"messages[{i}]"
        role = m.get("role") if isinstance(m, dict) else None
        if role == "system":
            text = _system_message(field, m, later_user=i < last_user)
            if text is not None and not out:  # before any turn: part of the system prompt
                leading.append(text)
            elif text is not None:
                out.append({"role": "system", "content": text})
            continue
        if role not in ("user", "assistant"):
            raise APIError(400, f"{field}.role must be user, assistant or system.",
                           param=f"{field}.role")
        content = m.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            raise APIError(400, f"{field}.content must be text or a list of blocks.",
                           param=f"{field}.content")
        out += (assistant_turn(field, content, called) if role == "assistant"
                else user_turn(field, content, called, loaded, images))
    if not out:
        raise APIError(400, "messages: a user turn is required besides system messages.",
                       param="messages")
    return out, leading


def _function_tools(tools, loaded: set[str]):
    """Client tools as OpenAI function tools; a `defer_loading` one only once
    a tool_reference has loaded it. cache_control, strict,
    eager_input_streaming, input_examples and allowed_callers change nothing."""
    if tools in (None, []):
        return None
    if not isinstance(tools, list):
        raise APIError(400, "tools must be a list.", param="tools")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") not in (None, "custom"):
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise APIError(400, f"tools[{i}]: server tools ({str(kind)[:60]!r}) are not "
                                "supported; this server runs client tools (name, "
                                "input_schema) only.", param=f"tools[{i}]")
        defer = _optional(tool, "defer_loading", bool, False, f"tools[{i}]")
        if defer and tool.get("name") not in loaded:
            continue
        function = {"name": tool.get("name"),
                    "parameters": tool.get("input_schema") or {"type": "object"}}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out or None


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
