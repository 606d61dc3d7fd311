"""A /v1/responses body (OpenAI's Responses API, which Codex CLI speaks),
validated whole and turned into the chat request the engine runs.

`input` is a string or a list of items: messages (system, developer, user,
assistant; text parts, and `input_image` parts in user messages: a data:
URL, or http(s) under --allow-image-urls), `function_call`,
`function_call_output` (each must answer a call made earlier in the
conversation) and `reasoning` (a model's
earlier thinking: left out of the prompt, as chat templates drop it).
`instructions` become the system turn (not carried over from a previous
response, as OpenAI documents). Function tools only; other tool types are
refused by name. `text.format` json_schema / json_object go through the
engine's grammars. Accepted and ignored (documented in the README): include,
store (honoured: whether the response is kept for previous_response_id),
prompt_cache_key (the prefix cache finds shared prefixes by itself),
service_tier, metadata (echoed), reasoning (effort/summary: a model thinks
or not by its template), truncation "disabled", user, safety_identifier,
parallel_tool_calls, text.verbosity, top_logprobs 0."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from .bodies import (Completion, _integer, _is_text, _optional, _params, _response_format,
                     _tools, read_image_part)
from .errors import APIError
from .overflow import policy_of
from .image_urls import ImageFetcher, RequestImages

MAX_ITEMS = 4096
FIELDS = {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls",
          "context_overflow",
          "text", "reasoning", "max_output_tokens", "temperature", "top_p", "top_k", "min_p",
          "repetition_penalty", "seed", "stream", "stream_options", "include", "store",
          "prompt_cache_key", "service_tier", "metadata", "previous_response_id", "user",
          "safety_identifier", "truncation", "top_logprobs", "background", "max_tool_calls",
          "prompt_cache_retention", "conversation", "client_metadata"}
TEXT_PARTS = ("input_text", "output_text", "text")


@dataclass(frozen=True, slots=True)
class ResponsesJob:
    """What a valid body asks for: the chat request (`job`, whose messages
    are the whole conversation), the turns this body adds (kept with the
    response for a follow-up), the previous response it continues, whether
    to keep this one, and the fields a response echoes back."""

    job: Completion
    new_messages: list[dict]
    previous_id: str | None
    store: bool
    echo: dict
    namespaces: dict  # a namespaced function's name -> its namespace (a call names it)


def parse(body: dict, defaults: dict, history,
          fetcher: ImageFetcher | None = None) -> ResponsesJob:
    """`history(previous_id)`: the stored conversation of that response (its
    turns and answer, as chat messages) or None when it is not known;
    `fetcher` reads http(s) image URLs (None: refused, saying why)."""
    for name in body:
        if name not in FIELDS:
            raise APIError(400, f"Unrecognized request argument: {name}.", param=name)
    if body.get("background"):
        raise APIError(400, "background responses are not supported.", param="background")
    if body.get("conversation") is not None:
        raise APIError(400, "conversation objects are not supported: use "
                            "previous_response_id.", param="conversation")
    if body.get("truncation") not in (None, "disabled", "auto"):
        raise APIError(400, "truncation must be disabled or auto.", param="truncation")
    if _integer(body, "top_logprobs", 0) != 0:
        raise APIError(400, "top_logprobs is not supported on /v1/responses yet.",
                       param="top_logprobs")
    previous_id = _optional(body, "previous_response_id", str, None)
    before: list[dict] = []
    if previous_id is not None:
        found = history(previous_id)
        if found is None:
            raise APIError(404, f"Previous response with id '{previous_id}' not found.",
                           param="previous_response_id", code="previous_response_not_found")
        before = found
    new = _input(body.get("input"), RequestImages(fetcher))
    _check_call_outputs(before + new)
    instructions = _optional(body, "instructions", str, None)
    messages = ([{"role": "system", "content": instructions}] if instructions else []) \
        + before + new
    if not any(m["role"] != "system" for m in messages):
        raise APIError(400, "input must hold at least one message or item.", param="input")
    chat = {"max_tokens": body.get("max_output_tokens")}
    for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "seed"):
        if name in body:
            chat[name] = body[name]
    params = _params({k: v for k, v in chat.items() if v is not None}, defaults)
    text = _optional(body, "text", dict, {})
    grammar = _text_format(text.get("format"))
    if grammar is not None:
        params = replace(params, grammar=grammar)
    if text.get("verbosity") not in (None, "low", "medium", "high"):
        raise APIError(400, "text.verbosity must be low, medium or high.",
                       param="text.verbosity")
    functions, namespaces = _function_tools(body.get("tools"))
    tools, tool_choice = _tools({"tools": functions,
                                 "tool_choice": _tool_choice(body.get("tool_choice"))})
    stream = _optional(body, "stream", bool, False)
    job = Completion(True, messages, None, params, _optional(body, "model", str, None), stream,
                     False, _optional(body, "user", str, None), tools, tool_choice,
                     context_overflow=policy_of(body))
    echo = _echo(body, instructions, text, params, previous_id)
    return ResponsesJob(job, new, previous_id, echo["store"], echo, namespaces)


def _echo(body: dict, instructions, text: dict, params, previous_id) -> dict:
    """The request's fields a response object repeats."""
    return {"instructions": instructions, "tools": body.get("tools") or [],
            "tool_choice": body.get("tool_choice") or "auto",
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "text": {"format": text.get("format") or {"type": "text"},
                     **({"verbosity": text["verbosity"]} if text.get("verbosity") else {})},
            "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
            "metadata": _optional(body, "metadata", dict, {}),
            "max_output_tokens": body.get("max_output_tokens"),
            "temperature": params.temperature, "top_p": params.top_p,
            "previous_response_id": previous_id, "store": _optional(body, "store", bool, True),
            "truncation": body.get("truncation") or "disabled",
            "prompt_cache_key": body.get("prompt_cache_key"),
            "service_tier": body.get("service_tier") or "default"}


def _input(value, images: RequestImages) -> list[dict]:
    """`input` as chat messages (consecutive function calls join one
    assistant turn, as chat templates show them)."""
    if isinstance(value, str):
        if not value or not _is_text(value):
            raise APIError(400, "input must be non-empty text or a list of items.",
                           param="input")
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise APIError(400, "input must be text or a non-empty list of items.", param="input")
    if len(value) > MAX_ITEMS:
        raise APIError(400, f"input holds more than {MAX_ITEMS} items.", param="input")
    out: list[dict] = []
    for i, item in enumerate(value):
        field = f"input[{i}]"
        if not isinstance(item, dict):
            raise APIError(400, f"{field} must be an object.", param=field)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            out.append(_message(field, item, images))
        elif kind == "function_call":
            call = _call(field, item)
            if out and out[-1]["role"] == "assistant" and out[-1].get("tool_calls") is not None:
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id, output = item.get("call_id"), item.get("output")
            if isinstance(output, list):  # output parts: text only
                output = _text_of(f"{field}.output", output)
            if not (isinstance(call_id, str) and call_id and isinstance(output, str)
                    and _is_text(output)):
                raise APIError(400, f"{field} needs a call_id and an output text.",
                               param=field)
            out.append({"role": "tool", "tool_call_id": call_id, "content": output})
        elif kind == "reasoning":
            continue  # earlier thinking: chat templates leave it out of the prompt
        else:
            raise APIError(400, f"{field}: items of type {kind!r} are not supported "
                                "(message, function_call, function_call_output, reasoning).",
                           param=f"{field}.type")
    return out


def _message(field: str, item: dict, request_images: RequestImages) -> dict:
    role = item.get("role")
    role = "system" if role == "developer" else role
    if role not in ("system", "user", "assistant"):
        raise APIError(400, f"{field}.role must be system, developer, user or assistant.",
                       param=f"{field}.role")
    content, order, images = item.get("content"), [], []
    if isinstance(content, list) and role == "user":
        content, order, images = _user_parts(f"{field}.content", content, request_images)
    elif isinstance(content, list):
        content = _text_of(f"{field}.content", content)
    if not isinstance(content, str) or not _is_text(content):
        raise APIError(400, f"{field}.content must be text or a list of text parts.",
                       param=f"{field}.content")
    out = {"role": role, "content": content}
    if images:  # read by a vision model only (the engine's capabilities.images)
        out["images"], out["parts"] = images, order
    return out


def _user_parts(field: str, parts: list, request_images: RequestImages):
    """A user message's parts: text, and `input_image` ({"image_url": a data:
    URL, or an http(s) one under --allow-image-urls}), read and checked here.
    The text, the parts in order, the images (as bodies._parts)."""
    texts, order, images = [], [], []
    for j, part in enumerate(parts):
        where = f"{field}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "input_image":
            texts.append(_text_of(field, [part], j))
            order.append({"type": "text", "text": texts[-1]})
            continue
        url = part.get("image_url")
        if not isinstance(url, str):
            raise APIError(400, f"{where}: an input_image needs an image_url (a data: URL"
                                "); file_id images are not supported.", param=where)
        read_image_part(request_images, url, where, images, order)
    return "".join(texts), order, images


def _text_of(field: str, parts: list, first: int = 0) -> str:
    texts = []
    for j, part in enumerate(parts, first):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        elif kind == "input_image":
            raise APIError(400, f"{field}[{j}]: images are read in user messages only.",
                           param=f"{field}[{j}]")
        elif kind in ("input_file", "input_audio"):
            raise APIError(400, f"{field}[{j}]: {kind} parts are not supported (text and "
                                "input_image).", param=f"{field}[{j}]")
        else:
            raise APIError(400, f"{field}[{j}] must be a text part ({{'type': 'input_text', "
                                "'text': ...}).", param=f"{field}[{j}]")
    return "".join(texts)


def _call(field: str, item: dict) -> dict:
    name, args, call_id = item.get("name"), item.get("arguments", ""), item.get("call_id")
    if not (isinstance(name, str) and name and isinstance(args, str)
            and isinstance(call_id, str) and call_id):
        raise APIError(400, f"{field} needs a name, a call_id and arguments (a JSON string).",
                       param=field)
    try:
        parsed = json.loads(args) if args else {}
    except ValueError:
        parsed = args  # shown to the model as it was sent
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": parsed}}


def _check_call_outputs(messages: list[dict]) -> None:
    """Every function_call_output answers a function_call made before it."""
    called: set[str] = set()
    for m in messages:
        for call in m.get("tool_calls") or ():
            called.add(call["id"])
        if m["role"] == "tool" and m["tool_call_id"] not in called:
            raise APIError(400, f"No tool call found for function call output with call_id "
                                f"{m['tool_call_id']}.", param="input")


HOSTED = {"web_search": 'web_search = "disabled"', "web_search_preview": None,
          "file_search": None, "code_interpreter": None, "image_generation": None,
          "computer_use_preview": None, "mcp": None, "local_shell": None}


def _function_tools(tools) -> tuple[list | None, dict]:
    """Responses' flat function tools in chat's shape, with those grouped in a
    `namespace` (Codex's sub-agent tools) flattened: (tools, name ->
    namespace). Other types are refused, saying what to do."""
    if tools in (None, []):
        return None, {}
    if not isinstance(tools, list):
        raise APIError(400, "tools must be a list.", param="tools")
    out, namespaces = [], {}
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "namespace" and isinstance(tool.get("tools"), list):
            inner, _ = _function_tools(tool["tools"])
            for entry in inner or ():
                namespaces[entry["function"]["name"]] = str(tool.get("name", ""))
            out += inner or []
            continue
        if kind != "function":
            hint = HOSTED.get(kind)
            raise APIError(400, f"tools[{i}]: tools of type {kind!r} are not supported; this "
                                "server runs function tools only" + (
                                    f" (a hosted tool: turn it off in the client; Codex: "
                                    f"{hint} in config.toml)" if hint else "") + ".",
                           param=f"tools[{i}].type")
        function = {"name": tool.get("name"),
                    "parameters": tool.get("parameters") or {"type": "object",
                                                             "properties": {}}}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out, namespaces


def _tool_choice(choice):
    if isinstance(choice, dict) and choice.get("type") == "function" and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        return choice.get("mode", "auto")
    return choice


def _text_format(fmt):
    """text.format: text, json_object or json_schema ({name, schema, strict} flat)."""
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise APIError(400, "text.format must be an object.", param="text.format")
    if fmt.get("type") == "json_schema":
        return _response_format({"type": "json_schema",
                                 "json_schema": {"schema": fmt.get("schema",
                                                                   {"type": "object"})}})
    return _response_format(fmt)
