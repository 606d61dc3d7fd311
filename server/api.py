"""An OpenAI-compatible HTTP API on Tandem's engine (Starlette, served by uvicorn).

It talks to the engine's public API only (`submit`, events, `cancel`): no MLX,
no Qt. API requests join the same engine as the app's chat tabs, batched and
routed with them; their `tab_id` is "api:<user or client address>" so the
Scheduler dock can label them.

A request's way through: the gate (trust.py: Host, Origin, content type);
the key (constant time); the body, read up to its limit, parsed and validated
whole on a worker thread (bodies.py); a slot (slots.py: 429 when all are
taken); `engine.prepare` (the chat template, the tokenizer, a grammar's build)
and `engine.submit` on a worker thread (a 4 MB message never stalls the event
loop); then the handle's events are awaited on the event loop (`async for`:
the engine's delivery thread wakes it, so a stream costs no thread). The slot is
given back on every path, and a client that disconnects, or stops reading a
stream, cancels its request.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from dataclasses import dataclass
from typing import Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine import Finished, Token

from .access_log import AccessLog
from .bodies import Completion, completion
from .embeddings import embeddings_route
from .errors import APIError, http_error, server_fault
from .overflow import DroppedHeader
from .flow import (GuardedStream, ServerConfig, ServerState, admit, check_key,  # noqa: F401
                   collect, model_ids, read_body, sse)
from .logprobs import chat_entries, completion_logprobs
from .messages import count_tokens_route, messages_route
from .models_list import models_list
from .raw_body import (MAX_BODY_BYTES, MAX_IMAGE_BODY_BYTES, check_images_carried,
                       parse_json)
from .responses import ResponseStore, responses_route
from .tool_calls import read_calls
from .trust import RequestGate


def _parse(data: bytes, chat: bool, defaults: dict, fetcher=None) -> Completion:
    """A chat request may be up to MAX_IMAGE_BODY_BYTES when it carries images
    (data: URLs); any other request is held to MAX_BODY_BYTES."""
    job = completion(parse_json(data, MAX_IMAGE_BODY_BYTES if chat else MAX_BODY_BYTES),
                     chat, defaults, fetcher)
    check_images_carried(data, job.messages, job.tools)
    return job


def _usage(done: Finished) -> dict:
    return {"prompt_tokens": done.prompt_tokens, "completion_tokens": done.output_tokens,
            "total_tokens": done.prompt_tokens + done.output_tokens,
            "prompt_tokens_details": {"cached_tokens": done.cached_tokens},
            # Drafts (`tandem serve --draft lookup`), in OpenAI's predicted-output terms.
            "completion_tokens_details": {
                "accepted_prediction_tokens": done.accepted_drafts,
                "rejected_prediction_tokens": done.drafted - done.accepted_drafts}}


def _finish_reason(done: Finished) -> str:
    return "length" if done.reason == "length" else "stop"


def make_app(engine, config: ServerConfig | None = None,
             access_log: Callable[[str], None] | None = None):
    """The ASGI app: the request gate in front of the routes (and, given
    `access_log`, one line per request written to it)."""
    config = config or ServerConfig()
    state = ServerState(engine, config)

    async def health(request: Request) -> Response:
        return _health(state)

    async def models(request: Request) -> Response:
        check_key(request, state)
        return models_list(state, request)

    async def chat_route(request: Request) -> Response:
        return await _completions(state, request, chat=True)

    async def text_route(request: Request) -> Response:
        return await _completions(state, request, chat=False)

    store = ResponseStore(max_bytes=config.stored_responses_bytes)

    async def responses(request: Request) -> Response:
        return await responses_route(state, store, request)

    async def messages(request: Request) -> Response:
        return await messages_route(state, request)

    async def count_tokens(request: Request) -> Response:
        return await count_tokens_route(state, request)

    async def embeddings(request: Request) -> Response:
        return await embeddings_route(state, request)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        state.close()  # the server stopped: its worker threads go too

    app = Starlette(lifespan=lifespan, routes=[
        Route("/health", health), Route("/v1/models", models),
        Route("/v1/chat/completions", chat_route, methods=["POST"]),
        Route("/v1/completions", text_route, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
    ], exception_handlers={APIError: _api_error, ClientDisconnect: _client_gone,
                           HTTPException: http_error, Exception: server_fault})
    gate = RequestGate(DroppedHeader(app), config.host, config.allow_hosts, config.allow_origins)
    outer = AccessLog(gate, access_log) if access_log is not None else gate
    outer.state = state  # for tests and the app: in_flight, ids
    return outer


def _health(state) -> Response:
    """The lanes' state, not only the process's: a server whose lanes all
    failed still listens (503, "failed"); one that lost a lane, or whose lane
    restarts after a failure (requests wait for it), serves on ("degraded");
    each such lane is named with its reason."""
    lanes = state.engine.lane_info()
    down = {lane.name: lane.failed for lane in lanes if lane.failed}
    up = len(lanes) - len(down)
    down.update({lane.name: f"{lane.phase} after: {lane.restarting}" for lane in lanes
                 if not lane.failed and getattr(lane, "restarting", None)})
    body = {"status": "ok" if not down else "degraded" if up else "failed",
            "model": state.ids[0], "in_flight": state.slots.in_flight}
    if down:
        body["lanes"] = down
    return JSONResponse(body, status_code=503 if lanes and not up else 200)


async def _api_error(request: Request, exc: APIError) -> Response:
    return exc.response()


async def _client_gone(request: Request, exc: ClientDisconnect) -> Response:
    return Response(status_code=499)


@dataclass(frozen=True)
class _Reply:
    """What names an answer: its id, creation time and object kind."""

    rid: str
    created: int
    kind: str  # "chat.completion" or "text_completion"


async def _completions(state: ServerState, request: Request, chat: bool) -> Response:
    """/v1/chat/completions and /v1/completions: key, body, model, slot,
    prepare and submit; then the answer whole, or streamed."""
    check_key(request, state)
    data = await read_body(request, MAX_IMAGE_BODY_BYTES if chat else MAX_BODY_BYTES)
    job = await state.run_for(request, _parse, data, chat,
                              state.engine.generation_defaults.as_dict(),
                              state.config.image_urls)
    slot, handle = await admit(state, request, job)
    reply = _Reply(("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12),
                   int(time.time()), "chat.completion" if chat else "text_completion")
    if job.stream:
        return GuardedStream(_stream(state, request, handle, reply, job),
                             slot, handle, state.config.send_timeout_s)
    done, scored = await collect(request, slot, handle)
    return _answer(state, job, reply, done, scored)


def _answer(state: ServerState, job: Completion, reply: _Reply, done: Finished,
            scored: list[Token]) -> Response:
    """A whole answer in OpenAI's shape (or the error it ended with)."""
    if done.reason == "error":
        raise APIError(500, done.error or "generation failed", kind="server_error")
    chat = job.chat
    message = {"role": "assistant", "content": done.text}
    if done.reasoning:  # a reasoning model's thinking, as llama.cpp and vLLM return it
        message["reasoning_content"] = done.reasoning
    finish = _finish_reason(done)
    if chat and done.tool_calls:
        calls, unread, _ = read_calls(state.engine, done.tool_calls, job.tools, done.cut_call)
        message["content"] = (done.text + unread) or None
        if calls:  # max_tokens cut the last: its arguments so far, finish_reason "length"
            message["tool_calls"] = calls
            finish = "length" if done.cut_call else "tool_calls"
    logprobs = None
    if job.params.logprobs is not None:
        logprobs = ({"content": chat_entries(scored, state.pieces)} if chat
                    else completion_logprobs(scored, state.pieces))
    choice = ({"index": 0, "message": message, "logprobs": logprobs,
               "finish_reason": finish} if chat else
              {"index": 0, "text": done.text, "finish_reason": _finish_reason(done),
               "logprobs": logprobs})
    return JSONResponse({"id": reply.rid, "object": reply.kind, "created": reply.created,
                         "model": state.ids[0], "choices": [choice],
                         "usage": _usage(done)})


class _Chunks:
    """A stream's server-sent events in OpenAI's chunk shapes: a token's
    logprobs go with the next chunk (its text may be held back), tool calls
    are numbered as they come."""

    def __init__(self, state: ServerState, reply: _Reply, job: Completion):
        self.state, self.reply, self.job = state, reply, job
        self.chat, self.include_usage = job.chat, job.include_usage
        self.scored: list[Token] = []  # tokens whose logprobs go with the next chunk
        self.offset = 0  # completions: characters streamed before this chunk
        self.calls_sent = 0  # tool calls streamed so far (their index)

    def start(self):
        if self.chat:
            yield self.chunk(None, first=True)

    def token(self, event: Token):
        """The chunks one `Token` makes."""
        if event.logprob is not None:
            self.scored.append(event)
        if self.chat and event.tool_calls:
            calls, unread, _ = read_calls(self.state.engine, event.tool_calls,
                                          self.job.tools, event.cut_call)
            if unread:
                yield self.chunk(unread)
            for call in calls:
                yield self.chunk(None, tool_call=(self.calls_sent, call))
                self.calls_sent += 1
        if self.chat and event.reasoning:
            yield self.chunk(event.text or None, reasoning=event.reasoning)
        elif event.text:
            yield self.chunk(event.text)

    def finished(self, event: Finished):
        """The chunks that end a stream: the finish reason and usage, or the error."""
        if event.reason == "error":
            error = {"error": {"message": event.error or "generation failed",
                               "type": "server_error"}}
            yield f"data: {json.dumps(error)}\n\n"
            yield "data: [DONE]\n\n"
            return
        yield self.chunk(None, finish="tool_calls" if self.calls_sent and not event.cut_call
                         else _finish_reason(event))
        if self.include_usage:
            yield self.chunk(None, usage=_usage(event))
        yield "data: [DONE]\n\n"

    def chunk(self, delta_or_text, finish=None, usage=None, first=False, reasoning=None,
              tool_call=None) -> str:
        if self.chat:
            delta = {"role": "assistant", "content": ""} if first else (
                {"content": delta_or_text} if delta_or_text is not None else {})
            if tool_call is not None:  # a whole call at once: name and arguments
                delta = {"tool_calls": [{"index": tool_call[0], **tool_call[1]}]}
            if reasoning:
                delta["reasoning_content"] = reasoning
            choices = [{"index": 0, "delta": delta, "finish_reason": finish,
                        **({"logprobs": self._logprobs()} if not first and usage is None
                           else {})}]
        else:
            choices = [{"index": 0, "text": delta_or_text or "", "finish_reason": finish,
                        "logprobs": self._logprobs() if usage is None else None}]
        reply = self.reply
        payload = {"id": reply.rid, "object": reply.kind + (".chunk" if self.chat else ""),
                   "created": reply.created, "model": self.state.ids[0],
                   "choices": choices if usage is None else []}
        if usage is not None:
            payload["usage"] = usage
        elif self.include_usage:
            payload["usage"] = None
        return f"data: {json.dumps(payload)}\n\n"

    def _logprobs(self):
        if self.job.params.logprobs is None:
            return None
        tokens, pieces = self.scored[:], self.state.pieces
        self.scored.clear()
        if self.chat:
            return {"content": chat_entries(tokens, pieces)}
        out = completion_logprobs(tokens, pieces, self.offset)
        self.offset += sum(len(pieces.piece(t.token_id)[0]) for t in tokens)
        return out


async def _stream(state: ServerState, request: Request, handle, reply: _Reply,
                  job: Completion):
    """OpenAI's chunks as server-sent events (flow.sse: a client gone away
    cancels the request at once; a stream costs no thread)."""
    async for chunk in sse(request, handle, _Chunks(state, reply, job)):
        yield chunk
