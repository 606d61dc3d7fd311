"""POST /v1/messages: Anthropic's Messages API on the same engine, gate and
slots as the OpenAI endpoints (messages_body.py turns the body into a chat
request). The key may come as `x-api-key` or a bearer token. The answer is a
`message` whose content holds thinking, text and tool_use blocks; streamed,
Anthropic's events in order (message_start, content_block_start / _delta /
_stop, message_delta, message_stop). POST /v1/messages/count_tokens counts
what the same body would put in the prompt. Every error is in Anthropic's
shape: {"type": "error", "error": {"type", "message"}}.

`stop_reason` is tool_use, max_tokens, stop_sequence (with `stop_sequence`
the one that ended the answer) or end_turn; a call max_tokens cut is a
tool_use block with the input written whole, and max_tokens."""

from __future__ import annotations

import json
import re
import secrets

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine import Finished, Token, partial_input

from .flow import (GuardedStream, ServerState, admit, check_key, check_model, collect,
                   prepare_chat, read_body, sse)
from .raw_body import MAX_IMAGE_BODY_BYTES, check_images_carried, parse_json
from .errors import APIError
from .messages_body import parse, tool_input
from .tool_calls import read_calls

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 503: "overloaded_error"}


def anthropic_error(exc: APIError) -> JSONResponse:
    kind = ERROR_TYPES.get(exc.status, "api_error")
    return JSONResponse({"type": "error", "error": {"type": kind, "message": exc.message}},
                        status_code=exc.status, headers=exc.headers)


async def messages_route(state: ServerState, request: Request) -> Response:
    try:
        return await _messages(state, request)
    except APIError as exc:
        return anthropic_error(too_long(exc))


_TOO_LONG = re.compile(r"is (\d+) tokens long, more than the model's context of (\d+) tokens")


def too_long(exc: APIError) -> APIError:
    """A prompt past the context in Anthropic's words (400, "prompt is too
    long: N tokens > M maximum", the error Claude Code knows); any other
    error as it is."""
    found = _TOO_LONG.search(exc.message) if exc.code == "context_length_exceeded" else None
    if found is None:
        return exc
    return APIError(400, f"prompt is too long: {found[1]} tokens > {found[2]} maximum",
                    code=exc.code)


async def _messages(state: ServerState, request: Request) -> Response:
    check_key(request, state)
    data = await read_body(request, MAX_IMAGE_BODY_BYTES)  # images may come (base64)
    body = await state.run_for(request, parse_json, data, MAX_IMAGE_BODY_BYTES)
    job = await state.run_for(request, parse, body, state.engine.generation_defaults.as_dict(),
                              state.config.image_urls)
    check_images_carried(data, job.messages, job.tools)
    slot, handle = await admit(state, request, job)
    reply = Reply(state, job, handle)
    if job.stream:
        return GuardedStream(reply.stream(request, handle), slot, handle,
                             state.config.send_timeout_s)
    done, _ = await collect(request, slot, handle)
    if done.reason == "error":
        raise APIError(500, done.error or "generation failed")
    return JSONResponse(reply.whole(done))


async def count_tokens_route(state: ServerState, request: Request) -> Response:
    """POST /v1/messages/count_tokens: {"input_tokens": N}, N the tokens the
    same body sent to /v1/messages would put in the prompt (the same parse,
    model check and prepare; max_tokens may be left out), under a slot while
    it is prepared."""
    try:
        check_key(request, state)
        data = await read_body(request, MAX_IMAGE_BODY_BYTES)
        body = await state.run_for(request, parse_json, data, MAX_IMAGE_BODY_BYTES)
        job = await state.run_for(request, parse, body,
                                  state.engine.generation_defaults.as_dict(),
                                  state.config.image_urls, True)
        check_images_carried(data, job.messages, job.tools)
        check_model(state, job.model)
        with state.slots.take():  # 429 when all are taken, as for an answer
            prepared = await state.run_for(request, prepare_chat, state, job)
        if prepared.prompt_ids is None:  # a model whose own server renders the prompt
            raise APIError(400, f"{state.ids[0]}'s prompts are rendered by its own server: "
                                "this server cannot count their tokens.")
        return JSONResponse({"input_tokens": len(prepared.prompt_ids)})
    except APIError as exc:
        return anthropic_error(exc)


class Reply:
    def __init__(self, state: ServerState, job, handle):
        self.state, self.job = state, job
        self.id = "msg_" + secrets.token_hex(12)
        self.prompt_tokens = getattr(getattr(handle, "request", None), "num_prompt", 0)

    def message(self, content: list, stop_reason, usage: dict,
                stop_sequence: str | None = None) -> dict:
        return {"id": self.id, "type": "message", "role": "assistant",
                "model": self.state.ids[0], "content": content, "stop_reason": stop_reason,
                "stop_sequence": stop_sequence, "usage": usage}

    def usage(self, done: Finished | None) -> dict:
        if done is None:
            return {"input_tokens": self.prompt_tokens, "output_tokens": 0,
                    "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
        return {"input_tokens": done.prompt_tokens - done.cached_tokens,
                "cache_read_input_tokens": done.cached_tokens,
                "cache_creation_input_tokens": 0, "output_tokens": done.output_tokens}

    def calls(self, raw, ended_in_call: bool = False) -> tuple[list[dict], str, bool]:
        """tool_use blocks, the text of calls not read, whether the last was
        cut short (as Anthropic's API: a tool_use block holding the input
        written whole, and stop_reason max_tokens)."""
        calls, unread, cut = read_calls(self.state.engine, raw, self.job.tools, ended_in_call)
        uses = [{"type": "tool_use", "id": "toolu_" + call["id"].removeprefix("call_"),
                 "name": call["function"]["name"],
                 "input": (partial_input if cut and i == len(calls) - 1 else tool_input)(
                     call["function"]["arguments"])} for i, call in enumerate(calls)]
        return uses, unread, cut

    @staticmethod
    def stop_reason(done: Finished, called: bool) -> str:
        if done.cut_call:  # the answer ended inside a call
            return "max_tokens"
        if called:
            return "tool_use"
        if done.reason == "length":
            return "max_tokens"
        return "stop_sequence" if done.stop_sequence is not None else "end_turn"

    @classmethod
    def stop_sequence(cls, done: Finished, called: bool) -> str | None:
        return done.stop_sequence if cls.stop_reason(done, called) == "stop_sequence" else None

    def whole(self, done: Finished) -> dict:
        uses, unread, _ = self.calls(done.tool_calls, done.cut_call)
        content = []
        if done.reasoning:  # thinking.display "omitted": the block, without its text
            content.append({"type": "thinking", "signature": "",
                            "thinking": done.reasoning if self.job.show_thinking else ""})
        if done.text + unread or not uses:
            content.append({"type": "text", "text": done.text + unread})
        return self.message(content + uses, self.stop_reason(done, bool(uses)),
                            self.usage(done), self.stop_sequence(done, bool(uses)))

    # ---- streamed -------------------------------------------------------------------
    @staticmethod
    def event(kind: str, **fields) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n"

    async def stream(self, request: Request, handle):
        async for chunk in sse(request, handle, Blocks(self)):
            yield chunk


class Blocks:
    """Content blocks opened, grown and closed as tokens arrive."""

    def __init__(self, reply: Reply):
        self.reply = reply
        self.index = -1
        self.open: str | None = None  # "text" or "thinking"
        self.called = False

    def start(self):
        reply = self.reply
        yield reply.event("message_start", message=reply.message([], None, reply.usage(None)))

    def finished(self, event: Finished):
        reply = self.reply
        yield from self.close()
        if event.reason == "error":
            yield reply.event("error", error={"type": "api_error",
                                              "message": event.error or "failed"})
            return
        yield reply.event("message_delta", delta={
            "stop_reason": reply.stop_reason(event, self.called),
            "stop_sequence": reply.stop_sequence(event, self.called)},
            usage=reply.usage(event))
        yield reply.event("message_stop")

    def token(self, event: Token):
        reply = self.reply
        if event.reasoning:
            yield from self._grow("thinking", event.reasoning)
        if event.text:
            yield from self._grow("text", event.text)
        if event.tool_calls:
            uses, unread, _ = reply.calls(event.tool_calls, event.cut_call)
            if unread:
                yield from self._grow("text", unread)
            for use in uses:
                yield from self.close()
                self.index += 1
                self.called = True
                yield reply.event("content_block_start", index=self.index,
                                  content_block={**use, "input": {}})
                yield reply.event("content_block_delta", index=self.index,
                                  delta={"type": "input_json_delta",
                                         "partial_json": json.dumps(use["input"])})
                yield reply.event("content_block_stop", index=self.index)

    def _grow(self, kind: str, text: str):
        reply = self.reply
        if self.open != kind:
            yield from self.close()
            self.index += 1
            self.open = kind
            block = ({"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking"
                     else {"type": "text", "text": ""})
            yield reply.event("content_block_start", index=self.index, content_block=block)
        if kind == "thinking" and not reply.job.show_thinking:
            return
        delta = ({"type": "thinking_delta", "thinking": text} if kind == "thinking"
                 else {"type": "text_delta", "text": text})
        yield reply.event("content_block_delta", index=self.index, delta=delta)

    def close(self):
        if self.open is not None:
            if self.open == "thinking":
                yield self.reply.event("content_block_delta", index=self.index,
                                       delta={"type": "signature_delta", "signature": ""})
            self.open = None
            yield self.reply.event("content_block_stop", index=self.index)
