"""A model's tool calls: the markers around them in its output and the
parser that reads them, from mlx-lm's tool parsers (mlx_lm/tool_parsers),
chosen as mlx-lm chooses: the tokenizer's own setting, else inferred from
the chat template (GGUF models too, whose wrapper Tandem builds itself).

A model whose template has no tool calling gets `None`: a request with
tools is then refused with the reason (server/bodies.py)."""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class ToolFormat:
    """How the model writes a tool call: `start` ... `end` around each one,
    read by `parse(text, tools)` -> {"name", "arguments"} (or a list)."""

    name: str  # mlx-lm's parser module, e.g. "json_tools"
    start: str
    end: str
    parse: Callable[[str, Any], Any]

    @property
    def json_calls(self) -> bool:
        """Calls are `start` + {"name": ..., "arguments": {...}} + `end`: the
        format constrained decoding can force (tool_choice required)."""
        return self.name == "json_tools"


def tool_format(tokenizer) -> ToolFormat | None:
    """The model's tool-call format, or None when its template has none."""
    start = getattr(tokenizer, "tool_call_start", None)
    parser = getattr(tokenizer, "tool_parser", None)
    if start is not None and parser is not None:
        name = getattr(parser, "__module__", "").rsplit(".", 1)[-1]
        return ToolFormat(name, start, tokenizer.tool_call_end, parser)
    try:
        from mlx_lm.tokenizer_utils import _infer_tool_parser

        name = _infer_tool_parser(getattr(tokenizer, "_tokenizer", tokenizer))
    except Exception:  # an odd template or vocabulary: no tool calling
        return None
    if name is None:
        return None
    module = importlib.import_module(f"mlx_lm.tool_parsers.{name}")
    return ToolFormat(name, module.tool_call_start, module.tool_call_end,
                      module.parse_tool_call)


def template_messages(messages: list[dict]) -> list[dict]:
    """OpenAI messages as chat templates expect them: an assistant's
    `tool_calls` with their arguments as objects (OpenAI sends JSON text),
    and its content '' when it only called tools."""
    out = []
    for message in messages:
        message = dict(message) if isinstance(message, dict) else message
        if not isinstance(message, dict):
            out.append(message)  # refused by the caller, with its reason
            continue
        if message.get("content") is None and message.get("tool_calls"):
            message["content"] = ""
        calls = message.get("tool_calls")
        if calls:
            fixed = []
            for call in calls:
                call = dict(call)
                function = dict(call.get("function") or {})
                args = function.get("arguments")
                if isinstance(args, str):
                    try:
                        function["arguments"] = json.loads(args) if args.strip() else {}
                    except ValueError:
                        pass  # left as written: the template shows it as text
                call["function"] = function
                fixed.append(call)
            message["tool_calls"] = fixed
        out.append(message)
    return out


def _marker(tokenizer, text: str) -> str:
    """A marker in llguidance's Lark: a token reference (`<tool_call>`) when
    the vocabulary has it as one added token (llguidance matches added tokens
    as tokens, not as their text), else the text."""
    if tokenizer is not None:
        ids = tokenizer.encode(text, add_special_tokens=False)
        added = getattr(tokenizer, "added_tokens_decoder", None) or {}
        if len(ids) == 1 and ids[0] in added:
            return text
    return json.dumps(text)


def call_grammar(fmt: ToolFormat, tools: list[dict], name: str | None = None,
                 tokenizer=None) -> str:
    """A Lark grammar (llguidance) for one or more calls of `tools` (or of
    the one called `name`) in `fmt`, their arguments held to each
    function's parameters schema: tool_choice required or a named function."""
    chosen = [t for t in tools if name is None or t["function"]["name"] == name]
    variants, defs = [], {}
    for i, tool in enumerate(chosen):
        function = tool["function"]
        params = _hoisted(_closed(function.get("parameters") or {"type": "object"}),
                          f"tool{i}.", defs)
        variants.append({"type": "object", "properties": {
            "name": {"const": function["name"]}, "arguments": params},
            "required": ["name", "arguments"], "additionalProperties": False})
    schema = dict(variants[0]) if len(variants) == 1 else {"anyOf": variants}
    if defs:
        schema["$defs"] = defs
    schema["x-guidance"] = {"whitespace_flexible": False}  # compact, as constrain.py
    start, end = _marker(tokenizer, fmt.start), _marker(tokenizer, fmt.end)
    many = "call+" if name is None else "call"
    return (f'start: {many}\ncall: {start} "\\n" body "\\n" {end}\n'
            f"body: %json {json.dumps(schema)}\n")


def _hoisted(params, prefix: str, defs: dict):
    """A tool's parameters schema made to stand inside the call's schema:
    its `$defs` / `definitions` moved to the root's `$defs` under `prefix`
    (tools may each name a `City`), and its local `$ref`s pointed there
    (what pydantic and zod emit: `#/$defs/City`; `#` and other pointers into
    the parameters themselves through a copy of them). `defs` gains them."""
    if not isinstance(params, dict):
        return params
    own = {}
    for key in ("$defs", "definitions"):
        if isinstance(params.get(key), dict):
            own.update({(key, k): v for k, v in params[key].items()})
    params = {k: v for k, v in params.items() if k not in ("$defs", "definitions")}
    whole = prefix + "parameters"
    used_whole = False

    def point(ref: str) -> str:
        nonlocal used_whole
        for key in ("$defs", "definitions"):
            head = f"#/{key}/"
            if ref.startswith(head):
                name, sep, rest = ref[len(head):].partition("/")
                return f"#/$defs/{prefix}{name}{sep}{rest}"
        used_whole = True
        return f"#/$defs/{whole}{ref[1:]}"

    def walk(node):
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items()}
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            out["$ref"] = point(ref)
        return out

    params = walk(params)
    for (_, name), value in own.items():
        defs[prefix + name.replace("~1", "/").replace("~0", "~")] = walk(value)
    if used_whole:
        defs[whole] = params
    return params


def _closed(schema):
    """`schema` with every object that lists its properties and says nothing
    of others closed to them (`additionalProperties: false`, as OpenAI's
    strict mode): a forced call writes the arguments the tool declares, and
    a model (a small one, or random weights) cannot wander into made-up
    keys until its tokens run out. Objects that allow others keep them."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _closed(v) if k in ("properties", "items", "anyOf", "oneOf", "allOf",
                                 "$defs", "definitions", "prefixItems") else v
           for k, v in schema.items()}
    if "properties" in out:
        out["properties"] = {k: _closed(v) for k, v in schema["properties"].items()}
        out.setdefault("additionalProperties", False)
    for key in ("$defs", "definitions"):
        if isinstance(schema.get(key), dict):
            out[key] = {k: _closed(v) for k, v in schema[key].items()}
    return out


def plan_tools(fmt: ToolFormat | None, tools: list[dict] | None, tool_choice, params,
               tokenizer=None):
    """What a request with `tools` needs: (tools for the template, params
    with a grammar for a required or named call, the format to read calls
    with). Raises EngineError when the model or the choice cannot do it."""
    from ..core.errors import EngineError
    from ..core.params import Grammar

    if not tools:
        return None, params, None
    if fmt is None:
        raise EngineError("This model's chat template has no tool calling (no tool-call "
                          "format Tandem can read for it): send the request without tools.",
                          "bad-argument")
    if tool_choice in (None, "auto"):
        return tools, params, fmt
    if tool_choice == "none":
        return None, params, None
    name = None
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        if name not in {t["function"]["name"] for t in tools}:
            raise EngineError(f"tool_choice names {name!r}, which is not among the tools.",
                              "bad-argument")
    elif tool_choice != "required":
        raise EngineError("tool_choice must be none, auto, required or a function.",
                          "bad-argument")
    if not fmt.json_calls:
        raise EngineError(f"Forcing a tool call (tool_choice {tool_choice!r}) needs a "
                          f"<tool_call>{{json}} format; this model writes {fmt.name} calls.",
                          "bad-argument")
    if params.grammar is not None:
        raise EngineError("A forced tool call and a response format cannot both hold.",
                          "bad-argument")
    from dataclasses import replace

    grammar = Grammar("lark", call_grammar(fmt, tools, name, tokenizer))
    return tools, replace(params, grammar=grammar), fmt
