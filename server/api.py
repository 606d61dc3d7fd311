"""An OpenAI-compatible HTTP API on Tandem's engine (Starlette, served by uvicorn).

It talks to the engine's public API only (`submit`, events, `cancel`): no MLX,
no Qt. API requests join the same engine as the app's chat tabs, batched and
routed with them; their `tab_id` is "api:<user or client address>" so the
Scheduler dock can label them. A bounded number of requests may be in flight
(429 with Retry-After beyond it); a client that disconnects cancels its request.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from engine import EngineError, Finished, SamplingParams, Token

MAX_BODY_BYTES = 4 << 20


@dataclass
class ServerConfig:
    model_id: str = "tandem"
    api_key: str | None = None
    max_in_flight: int = 64


class APIError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = (
            status, message, kind, param, code)
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


def _params(body: dict) -> SamplingParams:
    """OpenAI sampling fields -> SamplingParams; anything Tandem cannot honour is a 400."""
    if body.get("n", 1) != 1:
        raise APIError(400, "Only n = 1 is supported.", param="n")
    for name in ("frequency_penalty", "presence_penalty"):
        if body.get(name):
            raise APIError(400, f"{name} is not supported (use 0).", param=name)
    stop = body.get("stop")
    stop = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if not all(isinstance(s, str) for s in stop) or len(stop) > 4:
        raise APIError(400, "stop must be a string or a list of up to 4 strings.", param="stop")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 512))
    try:
        return SamplingParams(
            max_tokens=max_tokens, temperature=body.get("temperature", 1.0),
            top_p=body.get("top_p", 1.0), seed=body.get("seed"), stop=stop)
    except EngineError as e:
        raise APIError(400, str(e)) from None


class ServerState:
    """The engine the API serves and what it has in flight."""

    def __init__(self, engine, config: ServerConfig):
        self.engine, self.config = engine, config
        self.in_flight = 0
        self._lock = threading.Lock()

    def admit(self) -> None:
        with self._lock:
            if self.in_flight >= self.config.max_in_flight:
                raise APIError(429, "Too many requests in flight; retry shortly.",
                               kind="rate_limit_error", headers={"Retry-After": "1"})
            self.in_flight += 1

    def release(self) -> None:
        with self._lock:
            self.in_flight -= 1


def _check_key(request: Request, state: ServerState) -> None:
    key = state.config.api_key
    if key and request.headers.get("authorization") != f"Bearer {key}":
        raise APIError(401, "Invalid or missing API key.", kind="authentication_error",
                       code="invalid_api_key")


async def _body(request: Request) -> dict:
    data = await request.body()
    if len(data) > MAX_BODY_BYTES:
        raise APIError(413, f"Request body over {MAX_BODY_BYTES >> 20} MiB.")
    try:
        body = json.loads(data or b"{}")
    except ValueError:
        raise APIError(400, "The body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise APIError(400, "The body must be a JSON object.")
    return body


def _submit(state: ServerState, request: Request, body: dict, messages=None, prompt=None):
    model = body.get("model")
    if model not in (None, state.config.model_id):
        raise APIError(404, f"The model '{model}' does not exist; this server serves "
                       f"'{state.config.model_id}'.", param="model", code="model_not_found")
    params = _params(body)
    who = body.get("user") or (request.client.host if request.client else "client")
    try:
        if prompt is not None:
            ids = list(state.engine.tokenizer.encode(prompt))
            return state.engine.submit(prompt_ids=ids, params=params, tab_id=f"api:{who}")
        return state.engine.submit(messages, params, tab_id=f"api:{who}")
    except EngineError as e:
        if e.kind == "prompt-too-long":
            raise APIError(413, str(e), code="context_length_exceeded") from None
        if e.kind in ("closed", "lane-failed"):
            raise APIError(503, str(e), kind="server_error",
                           headers={"Retry-After": "5"}) from None
        raise APIError(400, str(e)) from None


async def _events(handle):
    """The handle's events, read on a worker thread, as an async iterator."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    def pump():
        for event in handle:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, event)
            except RuntimeError:  # the server is shutting down: nobody is listening
                return

    threading.Thread(target=pump, name="api-events", daemon=True).start()
    while True:
        event = await queue.get()
        yield event
        if isinstance(event, Finished):
            return


def _usage(done: Finished) -> dict:
    return {"prompt_tokens": done.prompt_tokens, "completion_tokens": done.output_tokens,
            "total_tokens": done.prompt_tokens + done.output_tokens,
            "prompt_tokens_details": {"cached_tokens": done.cached_tokens}}


def _finish_reason(done: Finished) -> str:
    return "length" if done.reason == "length" else "stop"


def make_app(engine, config: ServerConfig | None = None) -> Starlette:
    state = ServerState(engine, config or ServerConfig())

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": state.config.model_id,
                             "in_flight": state.in_flight})

    async def models(request: Request) -> Response:
        try:
            _check_key(request, state)
        except APIError as e:
            return e.response()
        return JSONResponse({"object": "list", "data": [
            {"id": state.config.model_id, "object": "model", "created": 0,
             "owned_by": "tandem"}]})

    async def completions(request: Request, chat: bool) -> Response:
        try:
            _check_key(request, state)
            body = await _body(request)
            if chat:
                messages = body.get("messages")
                if not isinstance(messages, list) or not messages:
                    raise APIError(400, "messages must be a non-empty list.", param="messages")
                messages = [_message(m) for m in messages]
                prompt = None
            else:
                prompt = body.get("prompt")
                if isinstance(prompt, list) and len(prompt) == 1:
                    prompt = prompt[0]
                if not isinstance(prompt, str) or not prompt:
                    raise APIError(400, "prompt must be a non-empty string.", param="prompt")
                messages = None
            state.admit()
        except APIError as e:
            return e.response()
        except ClientDisconnect:
            return Response(status_code=499)
        try:
            handle = _submit(state, request, body, messages, prompt)
        except APIError as e:
            state.release()
            return e.response()
        rid = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
        created = int(time.time())
        kind = "chat.completion" if chat else "text_completion"
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(
                _stream(state, request, handle, rid, created, kind, chat, include_usage),
                media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        try:
            text, done = "", None
            async for event in _events(handle):
                if await request.is_disconnected():
                    handle.cancel()
                if isinstance(event, Token):
                    text += event.text
                elif isinstance(event, Finished):
                    done = event
        finally:
            state.release()
        if done.reason == "error":
            return APIError(500, done.error or "generation failed", kind="server_error").response()
        choice = ({"index": 0, "message": {"role": "assistant", "content": done.text},
                   "finish_reason": _finish_reason(done)} if chat else
                  {"index": 0, "text": done.text, "finish_reason": _finish_reason(done),
                   "logprobs": None})
        return JSONResponse({"id": rid, "object": kind, "created": created,
                             "model": state.config.model_id, "choices": [choice],
                             "usage": _usage(done)})

    async def chat_route(request: Request) -> Response:
        return await completions(request, chat=True)

    async def text_route(request: Request) -> Response:
        return await completions(request, chat=False)

    return Starlette(routes=[
        Route("/health", health), Route("/v1/models", models),
        Route("/v1/chat/completions", chat_route, methods=["POST"]),
        Route("/v1/completions", text_route, methods=["POST"]),
    ])


def _message(m) -> dict:
    if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
        raise APIError(400, "Each message needs a role of system, user or assistant.",
                       param="messages")
    content = m.get("content")
    if isinstance(content, list):  # content parts: text only
        if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
            raise APIError(400, "Only text content parts are supported.", param="messages")
        content = "".join(p.get("text", "") for p in content)
    if not isinstance(content, str):
        raise APIError(400, "Message content must be text.", param="messages")
    return {"role": m["role"], "content": content}


async def _stream(state, request, handle, rid, created, kind, chat, include_usage):
    """Server-sent events; a client gone away cancels the request at once."""
    def chunk(delta_or_text, finish=None, usage=None, first=False):
        if chat:
            delta = {"role": "assistant", "content": ""} if first else (
                {"content": delta_or_text} if delta_or_text is not None else {})
            choices = [{"index": 0, "delta": delta, "finish_reason": finish}]
        else:
            choices = [{"index": 0, "text": delta_or_text or "", "finish_reason": finish,
                        "logprobs": None}]
        payload = {"id": rid, "object": kind + (".chunk" if chat else ""), "created": created,
                   "model": state.config.model_id, "choices": choices if usage is None else []}
        if usage is not None:
            payload["usage"] = usage
        elif include_usage:
            payload["usage"] = None
        return f"data: {json.dumps(payload)}\n\n"

    watcher = asyncio.create_task(_watch_disconnect(request, handle))
    try:
        if chat:
            yield chunk(None, first=True)
        async for event in _events(handle):
            if isinstance(event, Token) and event.text:
                yield chunk(event.text)
            elif isinstance(event, Finished):
                if event.reason == "error":
                    error = {"error": {"message": event.error or "generation failed",
                                       "type": "server_error"}}
                    yield f"data: {json.dumps(error)}\n\n"
                else:
                    yield chunk(None, finish=_finish_reason(event))
                    if include_usage:
                        yield chunk(None, usage=_usage(event))
        yield "data: [DONE]\n\n"
    finally:
        watcher.cancel()
        handle.cancel()  # no-op once finished; frees the slot if the client left
        state.release()


async def _watch_disconnect(request: Request, handle) -> None:
    while True:
        if await request.is_disconnected():
            handle.cancel()
            return
        await asyncio.sleep(0.05)
