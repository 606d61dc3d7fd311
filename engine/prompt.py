"""A request's prompt from what a caller sends: chat messages (with tools)
through the model's template, or raw token ids checked against the model;
`ModelPrompts`, `Engine`'s base, makes its `Prepared` of either and holds
what it answers about its model's prompts.

Message text is data (engine/models/chat_template.py keeps it apart from the
template's control tokens); tool definitions and earlier calls go into the
template as they are, so one that spells a control token is refused."""

from __future__ import annotations

import json

from .core.errors import EngineError
from .core.params import Grammar, SamplingParams
from .interface import Capabilities, Prepared
from .models.call_json import checked_call
from .models.chat_template import (NO_CHAT_TEMPLATE, has_chat_template, render_chat,
                                   special_strings)
from .models.tools import plan_tools, template_messages, tool_format


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


class ModelPrompts:
    """A loaded model's prompt side, as `Engine` (its subclass) answers for
    it: the tokenizer, thinking and tool-call formats, vocabulary, sampling
    defaults and grammars over the tokenizer; chats and raw prompts made
    ready for `submit`. Holds no lanes."""

    def __init__(self, loaded, worker_nice: int):
        from .runtime.constrain import Constraints
        from .runtime.textstream import thinking_format

        self.model_info, self.tokenizer, self.worker_nice = loaded, loaded.tokenizer, worker_nice
        self.generation_defaults = loaded.generation_defaults  # the model's own (gendefaults.py)
        self.thinking_format = thinking_format(loaded.tokenizer)  # None: it does not think
        self.tool_format = tool_format(loaded.tokenizer)  # None: its template has no tools
        self.context_length = loaded.context_length
        args = getattr(loaded.model, "args", None)
        self.vocab_size = int(getattr(args, "vocab_size", 0) or len(loaded.tokenizer.vocab))
        # Grammars (constrained decoding): llguidance over the model's tokenizer.
        self.constraints = Constraints(loaded.tokenizer._tokenizer, loaded.stop_token_ids,
                                       self.vocab_size, nice=worker_nice)

    @property
    def thinks(self) -> bool:
        """A reasoning model: its answers can begin with thinking (`<think>`
        and the other markers mlx-lm infers, or gpt-oss's channels)."""
        return self.thinking_format is not None

    def default_params(self, **overrides) -> SamplingParams:
        """The model's own sampling defaults (generation_config.json or GGUF
        metadata, else Tandem's), with `overrides`; `SamplingParams()` is greedy."""
        return SamplingParams(**{**self.generation_defaults.as_dict(), **overrides})

    def count_tokens(self, text: str) -> int:
        """How many tokens `text` adds to a message: the model's tokenizer,
        no special tokens added. Safe from any thread."""
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def render(self, messages: list[dict[str, str]], tools: list[dict] | None = None) -> list[int]:
        """Token ids of `messages` in the model's chat template, ready to answer
        (with `tools`, OpenAI-style, offered to the model). Message text is
        data: text that spells a control token stays plain text
        (engine/prompt.py, engine/models/chat_template.py)."""
        return render_messages(self.tokenizer, messages, tools)

    def parse_tool_call(self, text: str, tools: list[dict] | None = None):
        """One raw tool call (`Finished.tool_calls`) read by the model's parser
        (mlx-lm's): {"name", "arguments"} or a list of them; ValueError (or
        the parser's own error) when it cannot be read. Arguments holding a
        number JSON cannot carry are the model's text, or unread
        (models/call_json.py)."""
        if self.tool_format is None:
            raise ValueError("this model has no tool-call format")
        return checked_call(self.tool_format.parse(text, tools), text)

    def prepare_grammar(self, grammar: Grammar):
        """Build `grammar` (bounded, on a thread of its own, within a time
        limit) or find it built; EngineError says what is wrong with it. An
        app calls it off its GUI thread before `submit`, which then finds it
        cached."""
        return self.constraints.prepare(grammar)

    def prepare(self, messages: list[dict], *, continue_from: str | None = None,
                tools: list[dict] | None = None, grammar: Grammar | None = None,
                tool_choice=None) -> Prepared:
        """A chat made ready for `submit`, on the calling thread (an app calls
        it off its GUI thread: a long chat takes a while): the messages in the
        model's chat template with `tools` offered (`tool_choice` "none"
        offers none; "required" or a named function forces a call by a
        grammar), tokenized; `continue_from`, the text of an interrupted
        answer, appended to be written further; `grammar` (or the forced
        call's) built, so `submit` finds it cached. EngineError says what is
        wrong with any of it."""
        offered, shaped, calls = plan_tools(self.tool_format, tools, tool_choice,
                                            SamplingParams(grammar=grammar),
                                            self.tokenizer._tokenizer)
        if any(m.get("images") for m in messages or () if isinstance(m, dict)):
            return self._prepare_images(messages, offered, shaped, calls, continue_from)
        ids = self.render(messages or [], offered)
        if continue_from:
            ids += list(self.tokenizer.encode(continue_from, add_special_tokens=False))
        if shaped.grammar is not None:  # a big schema takes a while to build
            self.prepare_grammar(shaped.grammar)
        return Prepared(list(messages or []), ids, shaped.grammar, continue_from or None,
                        offered, calls)

    def _prepare_images(self, messages, offered, shaped, calls, continue_from) -> Prepared:
        """A chat with images, through the vision model's processor
        (engine/models/vision.py): its key ids and VisionInputs."""
        from .models.vision import render_with_images

        if not getattr(self.model_info.model, "reads_images", False):  # capabilities.images
            raise EngineError(f"{self.model_info.label} cannot read images: it is a text "
                              "model. Load a vision model to send images.", "bad-argument")
        keys, vision = render_with_images(self.model_info.model, messages, self.vocab_size,
                                          special_strings(self.tokenizer._tokenizer), offered,
                                          continue_from)
        if shaped.grammar is not None:
            self.prepare_grammar(shaped.grammar)
        return Prepared(list(messages), keys, shaped.grammar, continue_from or None, offered,
                        calls, vision)

    def prepare_prompt(self, prompt: str | list[int], *,
                       grammar: Grammar | None = None) -> Prepared:
        """A raw completion prompt made ready for `submit`: text tokenized as
        the model's tokenizer does by default, or token ids, each checked
        against the vocabulary; `grammar` built."""
        ids = encode_raw(self.tokenizer, prompt) if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise EngineError("The prompt is empty.", "bad-argument")
        check_ids(ids, self.vocab_size)
        if grammar is not None:
            self.prepare_grammar(SamplingParams(grammar=grammar).grammar)
        return Prepared(None, ids, grammar)

    def _for_submit(self, prepared, params: SamplingParams, prompt_ids, tools,
                    tool_choice) -> Prepared:
        """`submit`'s request as a `Prepared`: the shorthands go through `prepare`."""
        if isinstance(prepared, Prepared):
            if prompt_ids is not None or tools or tool_choice is not None:
                raise EngineError("A prepared request has its prompt and tools already "
                                  "(give tools to prepare).", "bad-argument")
            if prepared.prompt_ids is None:
                raise EngineError("This engine renders prompts itself: submit what its "
                                  "own prepare made.", "bad-argument")
            return prepared
        if prompt_ids is not None:
            return self.prepare_prompt(prompt_ids)
        return self.prepare(prepared or [], tools=tools, tool_choice=tool_choice,
                            grammar=params.grammar)


class PromptOnly:
    """A model's prompt side without its weights: its tokenizer, chat
    template, tool-call format and context, as `Engine` has them; for what
    needs no forward pass (which tools would fit: toolhost/offer.py's `fit`
    takes it as it takes an engine). `load(source)`: EngineError if the
    tokenizer cannot be had."""

    def __init__(self, loaded):
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
        offered, _, _ = plan_tools(self.tool_format, tools, tool_choice, self._params,
                                   self.tokenizer._tokenizer)
        return render_messages(self.tokenizer, messages, offered)

    def count_tokens(self, text: str) -> int:
        """As `Engine.count_tokens`: no special tokens added."""
        return len(self.tokenizer.encode(text, add_special_tokens=False))
