"""A request body, parsed and validated whole before the request is admitted:
every field is checked for its type and range here, so nothing later can fail
on what a client sent. Bad input is a 400 that names the field."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace

from engine import EngineError, Grammar, SamplingParams

from .errors import APIError
from .overflow import policy_of
from .image_urls import ImageFetcher, RequestImages
# Their home is raw_body; named here too for the modules that import them from bodies.
from .raw_body import MAX_BODY_BYTES, MAX_IMAGE_BODY_BYTES, parse_json  # noqa: F401
from .raw_body import is_text as _is_text

ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True, slots=True)
class Completion:
    """What a valid /v1/chat/completions or /v1/completions body asks for."""

    chat: bool
    messages: list[dict[str, str]] | None  # chat
    prompt: str | list[int] | None  # completions: raw text (tokenized as it is) or ids
    params: SamplingParams
    model: str | None
    stream: bool
    include_usage: bool
    user: str | None
    tools: list | None = None  # OpenAI function tools (chat)
    tool_choice: object = None
    # the messages again, for a template that refuses `messages` as they are
    # (a system message inside the conversation folded into a user turn)
    folded: list[dict] | None = None
    # which turns leave the model's view past the context (server/overflow.py);
    # None: the server's --context-overflow
    context_overflow: str | None = None


def completion(body: dict, chat: bool, defaults: dict | None = None,
               fetcher: ImageFetcher | None = None) -> Completion:
    """The request's parts, validated. Sampling fields left out take
    `defaults` (the model's own: Engine.generation_defaults), else OpenAI's;
    image URLs are fetched by `fetcher` (None: refused, saying why)."""
    if chat:
        messages, prompt = _messages(body.get("messages"), fetcher), None
    else:
        messages, prompt = None, _prompt(body.get("prompt"))
    stream = _optional(body, "stream", bool, False)
    options = _optional(body, "stream_options", dict, None)
    include_usage = False
    if options is not None:
        include_usage = _optional(options, "include_usage", bool, False, "stream_options")
    _known_fields(body, chat)
    params = _params(body, defaults or {})
    logprobs = _logprobs(body, chat)
    if logprobs is not None:
        params = replace(params, logprobs=logprobs)
    grammar = _response_format(body.get("response_format"))
    if grammar is not None:
        params = replace(params, grammar=grammar)
    tools, tool_choice = _tools(body) if chat else (None, None)
    return Completion(chat, messages, prompt, params,
                      _optional(body, "model", str, None), stream, include_usage,
                      _optional(body, "user", str, None), tools, tool_choice,
                      context_overflow=policy_of(body) if chat else None)


def _response_format(value) -> Grammar | None:
    """OpenAI's response_format: text, json_object (any JSON object) or
    json_schema (its `schema`; enforced whether `strict` or not, as vLLM does)."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return Grammar("json_schema", '{"type": "object"}')
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict):
            raise APIError(400, "response_format.json_schema must be an object with a "
                                "'schema'.", param="response_format.json_schema")
        schema = spec.get("schema", {"type": "object"})
        if not isinstance(schema, (dict, bool)):
            raise APIError(400, "response_format.json_schema.schema must be a JSON schema "
                                "(an object).", param="response_format.json_schema.schema")
        try:
            return Grammar("json_schema", json.dumps(schema))
        except EngineError as e:
            raise APIError(400, str(e), param="response_format") from None
    raise APIError(400, "response_format.type must be text, json_object or json_schema.",
                   param="response_format")


def _logprobs(body: dict, chat: bool) -> int | None:
    """How many alternatives per token to return (None: no logprobs). Chat:
    `logprobs: true` and `top_logprobs` 0-20; completions: `logprobs` 0-5."""
    if chat:
        wanted = _optional(body, "logprobs", bool, False)
        top = _integer(body, "top_logprobs", None)
        if top is not None and not 0 <= top <= 20:
            raise APIError(400, "top_logprobs must be from 0 to 20.", param="top_logprobs")
        if top is not None and not wanted:
            raise APIError(400, "top_logprobs needs logprobs: true.", param="top_logprobs")
        return (top or 0) if wanted else None
    value = body.get("logprobs")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 5:
        raise APIError(400, "logprobs must be an integer from 0 to 5.", param="logprobs")
    return value


# Fields a body may carry. Each changes the answer as OpenAI's API says, or is
# bookkeeping that changes nothing here (user, store, metadata, service_tier);
# a field that would change the answer and is not done yet is refused by name.
COMMON_FIELDS = {"model", "stream", "stream_options", "max_tokens", "temperature", "top_p",
                 "top_k", "min_p", "repetition_penalty", "n", "frequency_penalty",
                 "presence_penalty", "stop", "seed", "user", "logprobs", "logit_bias",
                 "prediction", "num_draft_tokens"}
CHAT_FIELDS = COMMON_FIELDS | {"messages", "max_completion_tokens", "top_logprobs", "store",
                               "metadata", "service_tier", "parallel_tool_calls", "tools",
                               "tool_choice", "response_format", "context_overflow"}
COMPLETION_FIELDS = COMMON_FIELDS | {"prompt", "echo", "suffix", "best_of", "response_format"}
NOT_YET = {  # field -> the value that changes nothing (anything else: a 400)
    "logit_bias": [None, {}],
    "echo": [None, False], "suffix": [None, ""], "best_of": [None, 1],
    "parallel_tool_calls": [None, True, False],
}


def _known_fields(body: dict, chat: bool) -> None:
    allowed = CHAT_FIELDS if chat else COMPLETION_FIELDS
    for name in body:
        if name not in allowed:
            raise APIError(400, f"Unrecognized request argument: {name}.", param=name)
    for name, harmless in NOT_YET.items():
        if name in body and body[name] not in harmless:
            raise APIError(400, f"{name} is not supported by this server yet.", param=name)


def _optional(body: dict, name: str, kind: type, default, where: str | None = None):
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        field = f"{where}.{name}" if where else name
        raise APIError(400, f"{field} must be {_KIND_NAMES[kind]}.", param=field)
    return value


_KIND_NAMES = {bool: "true or false", dict: "an object", str: "a string", int: "an integer",
               float: "a number", list: "a list"}


def _number(body: dict, name: str, default: float | None) -> float | None:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise APIError(400, f"{name} must be a finite number.", param=name)
    return value


def _integer(body: dict, name: str, default: int | None) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise APIError(400, f"{name} must be an integer.", param=name)
    return value


def _prediction(value) -> str | None:
    """OpenAI's predicted output, {"type": "content", "content": text or
    [{"type": "text", "text": ...}, ...]}, as text (drafts propose from it)."""
    if value is None:
        return None
    content = value.get("content") if isinstance(value, dict) else None
    if isinstance(value, dict) and value.get("type") == "content" and isinstance(content, list):
        if all(isinstance(p, dict) and p.get("type") == "text"
               and isinstance(p.get("text"), str) for p in content):
            content = "".join(p["text"] for p in content)
    if not (isinstance(value, dict) and value.get("type") == "content"
            and isinstance(content, str) and _is_text(content)):
        raise APIError(400, 'prediction must be {"type": "content", "content": text or a '
                       'list of text parts}.', param="prediction")
    return content or None


def _params(body: dict, defaults: dict) -> SamplingParams:
    """OpenAI sampling fields (and the common extensions top_k, min_p,
    repetition_penalty) -> SamplingParams; a field left out takes the model's
    default; anything Tandem cannot honour is a 400."""
    if _integer(body, "n", 1) != 1:
        raise APIError(400, "Only n = 1 is supported.", param="n")
    for name in ("frequency_penalty", "presence_penalty"):
        if _number(body, name, 0):
            raise APIError(400, f"{name} is not supported (use 0).", param=name)
    stop = body.get("stop")
    stop = (stop,) if isinstance(stop, str) else stop
    if stop is None:
        stop = ()
    if (not isinstance(stop, (list, tuple)) or len(stop) > 4
            or not all(isinstance(s, str) and s and _is_text(s) for s in stop)):
        raise APIError(400, "stop must be a string or a list of up to 4 non-empty strings.",
                       param="stop")
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None \
        else "max_tokens"
    try:
        return SamplingParams(
            # Left out: no limit short of the context (OpenAI's chat default;
            # the engine reserves KV for such an answer as it grows).
            max_tokens=_integer(body, name, None),
            temperature=_number(body, "temperature", defaults.get("temperature", 1.0)),
            top_p=_number(body, "top_p", defaults.get("top_p", 1.0)),
            top_k=_integer(body, "top_k", defaults.get("top_k", 0)),
            min_p=_number(body, "min_p", defaults.get("min_p", 0.0)),
            repetition_penalty=_number(body, "repetition_penalty",
                                       defaults.get("repetition_penalty", 1.0)),
            seed=_integer(body, "seed", None), stop=tuple(stop),
            draft_tokens=_integer(body, "num_draft_tokens", None),
            prediction=_prediction(body.get("prediction")))
    except EngineError as e:
        raise APIError(400, str(e)) from None


def _messages(messages, fetcher: ImageFetcher | None = None) -> list[dict[str, str]]:
    if not isinstance(messages, list) or not messages:
        raise APIError(400, "messages must be a non-empty list.", param="messages")
    images = RequestImages(fetcher)  # the request's images together
    return [_message(i, m, images) for i, m in enumerate(messages)]


def _parts(field: str, role: str, parts: list,
           request_images: RequestImages) -> tuple[str, list, list]:
    """Content parts: text, and images (`image_url` with a data: URL, or an
    http(s) one under --allow-image-urls) in a user message, each read,
    decoded and checked here, on the worker thread. The
    text joined, the parts in order ({"type": "text"} or {"type": "image",
    "index"}), and the images."""
    texts, order, images = [], [], []
    for j, part in enumerate(parts):
        where = f"{field}.content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
            order.append({"type": "text", "text": part["text"]})
            continue
        if kind != "image_url":
            raise APIError(400, f"{where}: only text parts ({{'type': 'text', 'text': '...'}}) "
                           "and image parts ({'type': 'image_url', 'image_url': {'url': "
                           "'data:image/png;base64,...'}}) are supported.", param=where)
        if role != "user":
            raise APIError(400, f"{where}: images are read in user messages only.",
                           param=where)
        value = part.get("image_url")
        url = value.get("url") if isinstance(value, dict) else value
        if not isinstance(url, str):
            raise APIError(400, f"{where}.image_url needs a url (a data: URL).",
                           param=f"{where}.image_url")
        read_image_part(request_images, url, where, images, order)
    return "".join(texts), order, images


def read_image_part(request_images: RequestImages, url: str, where: str, images: list,
                    order: list) -> None:
    """An image part's URL read into `images` and placed in `order`; a 400
    naming the part (`where`) when it cannot be."""
    try:
        images.append(request_images.url(url, f"The image in {where}"))
    except EngineError as e:
        raise APIError(400, str(e), param=f"{where}.image_url") from None
    order.append({"type": "image", "index": len(images) - 1})


def _message(i: int, m, request_images: RequestImages | None = None) -> dict:
    field = f"messages[{i}]"
    if isinstance(m, dict) and m.get("role") == "developer":  # OpenAI's newer name
        m = {**m, "role": "system"}
    if not isinstance(m, dict) or m.get("role") not in ROLES:
        raise APIError(400, f"{field} needs a role of system, user, assistant or tool.",
                       param=f"{field}.role")
    content = m.get("content")
    calls = m.get("tool_calls") if m["role"] == "assistant" else None
    if content is None and calls:
        content = ""  # an assistant turn that only called tools
    order, images = None, []
    if isinstance(content, list):  # content parts: text, and images in a user turn
        content, order, images = _parts(field, m["role"], content,
                                        request_images or RequestImages())
    if not isinstance(content, str):
        raise APIError(400, f"{field}.content must be text.", param=f"{field}.content")
    if not _is_text(content):
        raise APIError(400, f"{field}.content is not valid text (an unpaired surrogate).",
                       param=f"{field}.content")
    out = {"role": m["role"], "content": content}
    if images:  # the engine reads them only with a vision model (capabilities.images)
        out["images"], out["parts"] = images, order
    if calls is not None:
        out["tool_calls"] = _tool_calls(field, calls)
    if m["role"] == "tool":
        call_id = m.get("tool_call_id")
        if call_id is not None and not isinstance(call_id, str):
            raise APIError(400, f"{field}.tool_call_id must be a string.",
                           param=f"{field}.tool_call_id")
        out["tool_call_id"] = call_id or ""
    return out


def _tool_calls(field: str, calls) -> list[dict]:
    """An assistant turn's earlier tool calls, as the template shows them."""
    if not isinstance(calls, list) or len(calls) > MAX_TOOLS:
        raise APIError(400, f"{field}.tool_calls must be a list.", param=f"{field}.tool_calls")
    out = []
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not (isinstance(function, dict) and isinstance(function.get("name"), str)
                and isinstance(function.get("arguments", ""), (str, dict))):
            raise APIError(400, f"{field}.tool_calls[{j}] needs a function with a name and "
                                "arguments.", param=f"{field}.tool_calls")
        out.append({"id": str(call.get("id", "")), "type": "function",
                    "function": {"name": function["name"],
                                 "arguments": function.get("arguments", "")}})
    return out


MAX_TOOLS = 128
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _tools(body: dict):
    """OpenAI function tools and tool_choice, checked: (tools or None, choice)."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools in (None, []):
        if choice not in (None, "none", "auto"):
            raise APIError(400, "tool_choice needs tools.", param="tool_choice")
        return None, None
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        raise APIError(400, f"tools must be a list of at most {MAX_TOOLS} functions.",
                       param="tools")
    checked = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not (isinstance(tool, dict) and tool.get("type") == "function"
                and isinstance(function, dict) and isinstance(function.get("name"), str)
                and TOOL_NAME.match(function["name"])):
            raise APIError(400, f"tools[{i}] must be {{'type': 'function', 'function': "
                                "{'name': ..., 'parameters': {...}}} with a name of letters, "
                                "digits, _ and -.", param=f"tools[{i}]")
        params = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise APIError(400, f"tools[{i}].function.parameters must be a JSON schema.",
                           param=f"tools[{i}].function.parameters")
        entry = {"name": function["name"], "parameters": params}
        if isinstance(function.get("description"), str):
            entry["description"] = function["description"]
        checked.append({"type": "function", "function": entry})
    if choice not in (None, "none", "auto", "required") and not (
            isinstance(choice, dict) and choice.get("type") == "function"
            and isinstance(choice.get("function"), dict)
            and isinstance(choice["function"].get("name"), str)):
        raise APIError(400, "tool_choice must be none, auto, required or "
                            "{'type': 'function', 'function': {'name': ...}}.",
                       param="tool_choice")
    return checked, choice


MAX_PROMPT_IDS = 1 << 20


def _prompt(prompt) -> str | list[int]:
    """Text, or token ids (one prompt: a list of integers, as OpenAI's API
    and vLLM take them; the engine checks each id against the vocabulary)."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt:
        if len(prompt) > MAX_PROMPT_IDS or not all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in prompt):
            raise APIError(400, "prompt must be a string or a list of token ids "
                                "(integers >= 0).", param="prompt")
        return list(prompt)
    if not isinstance(prompt, str) or not prompt:
        raise APIError(400, "prompt must be a non-empty string or a list of token ids.",
                       param="prompt")
    if not _is_text(prompt):
        raise APIError(400, "prompt is not valid text (an unpaired surrogate).",
                       param="prompt")
    return prompt
