"""A request's prompt from what a caller sends: chat messages (with tools)
through the model's template, or raw token ids checked against the model.

Message text is data (engine/models/chat_template.py keeps it apart from the
template's control tokens); tool definitions and earlier calls go into the
template as they are, so one that spells a control token is refused."""

from __future__ import annotations

import json

from .core.errors import EngineError
from .models.chat_template import (NO_CHAT_TEMPLATE, has_chat_template, render_chat,
                                   special_strings)
from .models.tools import template_messages


def render_messages(tokenizer, messages: list[dict], tools: list[dict] | None = None
                    ) -> list[int]:
    """Token ids of `messages` (OpenAI-style, with `tools` offered) in the
    model's chat template, ready to answer; EngineError says what is wrong
    (kind "no-chat-template": a base model, which takes raw text only)."""
    if not has_chat_template(tokenizer):
        raise EngineError(NO_CHAT_TEMPLATE, "no-chat-template")
    messages = template_messages(messages)
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            raise EngineError(f"Message {i + 1} has no text content.", "bad-argument")
        try:
            content.encode("utf-8")
        except UnicodeEncodeError as e:  # lone surrogates: not text
            raise EngineError(
                f"Message {i + 1} is not valid text: it contains an unpaired surrogate "
                f"(U+{ord(content[e.start]):04X}) at character {e.start}.",
                "bad-argument") from None
    if tools or any(m.get("tool_calls") for m in messages):
        # As the template will spell them: non-ASCII kept (DeepSeek's control
        # tokens are full-width; escaped as \uXXXX they would never match).
        spelled = json.dumps([tools, [m.get("tool_calls") for m in messages]],
                             ensure_ascii=False, default=str)
        hit = next((s for s in special_strings(tokenizer) if s in spelled), None)
        if hit is not None:
            raise EngineError(f"A tool definition or call contains {hit!r}, one of the "
                              "model's control tokens; remove it.", "bad-argument")
    try:
        return render_chat(tokenizer, messages, **({"tools": tools} if tools else {}))
    except EngineError:
        raise
    except Exception as e:
        raise EngineError(f"Cannot apply the chat template: {e}", "bad-argument") from e


def encode_raw(tokenizer, text: str) -> list[int]:
    """A raw prompt's ids as the model's tokenizer makes them (its BOS where
    it adds one); a prompt that spells the BOS itself ("<s>[INST] ..." pasted
    from a model card) keeps one, not two: llama.cpp warns of the doubled BOS,
    which degrades the answer."""
    ids = list(tokenizer.encode(text))
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is not None and ids[:2] == [bos, bos]:
        written = tokenizer.encode(text, add_special_tokens=False)
        if written[:1] == [bos]:  # the text's own BOS: the added one goes
            ids = ids[1:]
    return ids


def check_ids(ids: list[int], vocab: int) -> None:
    """Raw token ids (an API's prompt) are each a token of this model: an id
    past the embedding would read outside it."""
    bad = next((i for i in ids if not isinstance(i, int) or isinstance(i, bool)
                or not 0 <= i < vocab), None)
    if bad is not None:
        raise EngineError(f"Token id {bad!r} is not in this model's vocabulary "
                          f"(0 to {vocab - 1}).", "bad-argument")


def with_grammar(params, grammar):
    """`params` holding `grammar`, the one a request was prepared with (a
    response format, or a forced tool call's): the same grammar in both, or
    only in one of them; two different ones are the caller's error."""
    if grammar is None or params.grammar == grammar:
        return params
    if params.grammar is None:
        from dataclasses import replace

        return replace(params, grammar=grammar)
    raise EngineError("The sampling parameters ask for another grammar than the one the "
                      "request was prepared with (a forced tool call and a response "
                      "format cannot both hold).", "bad-argument")


class PromptOnly:
    """A model's prompt side without its weights: its tokenizer, chat
    template, tool-call format and context, as `Engine` has them; for what
    needs no forward pass (which tools would fit: toolhost/offer.py's `fit`
    takes it as it takes an engine). `load(source)`: EngineError if the
    tokenizer cannot be had."""

    def __init__(self, loaded):
        from .core.params import SamplingParams
        from .interface import Capabilities
        from .models.tools import tool_format

        self.tokenizer, self.context_length = loaded.tokenizer, loaded.context_length
        self.label = loaded.label
        self.tool_format = tool_format(self.tokenizer)
        self._params = SamplingParams()
        self.capabilities = Capabilities(
            modes=(), remote_lanes=False, renders_locally=True, logprobs=False,
            grammars=False, tools=self.tool_format is not None,
            chat=has_chat_template(self.tokenizer))

    @classmethod
    def load(cls, source: str) -> "PromptOnly":
        from .models.tokenizer_only import load_tokenizer

        return cls(load_tokenizer(source))

    def prepare(self, messages: list[dict], *, tools: list[dict] | None = None,
                tool_choice=None) -> list[int]:
        """The prompt's token ids, as `Engine.prepare` renders them."""
        from .models.tools import plan_tools

        offered, _, _ = plan_tools(self.tool_format, tools, tool_choice, self._params,
                                   self.tokenizer._tokenizer)
        return render_messages(self.tokenizer, messages, offered)

    def count_tokens(self, text: str) -> int:
        """As `Engine.count_tokens`: no special tokens added."""
        return len(self.tokenizer.encode(text, add_special_tokens=False))
