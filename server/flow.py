"""A request's way through the server, shared by every endpoint (api.py's
OpenAI chat and completions, responses.py, messages.py, embeddings.py): the
server's config and state, the key, the body read up to its limit, a slot,
`prepare` and `submit` on a worker thread, a whole answer collected, or a
stream guarded so that its slot is given back and its request cancelled
however it ends."""

from __future__ import annotations

import asyncio
import logging
import shlex
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from starlette.requests import ClientDisconnect, Request
from starlette.responses import StreamingResponse

from engine import EngineError, Finished, Token

from .aliases import check_aliases, resolve
from .bodies import Completion
from .errors import APIError
from .overflow import fitted
from .messages_blocks import folded
from .image_urls import ImageFetcher, ServerImages, cannot_read_images
from .logprobs import TokenPieces
from .raw_body import read_body  # noqa: F401 (the routes read bodies through flow)
from .slots import Slot, Slots
from .trust import key_matches

log = logging.getLogger("tandem.server")
BULK_WORKERS = 4  # threads for bulky requests: big bodies, image URLs to fetch


@dataclass
class ServerConfig:
    model_id: str | None = None  # None: the model's own name (and "default" for the bundled one)
    api_key: str | None = None
    max_in_flight: int = 64
    host: str = "127.0.0.1"  # the address it is bound to (Host headers may name it)
    allow_hosts: tuple[str, ...] = ()  # more host names it answers for
    allow_origins: tuple[str, ...] = ()  # web origins allowed to call it (CORS)
    workers: int = 2  # threads that parse bodies, apply templates and tokenize (0: the
    # event loop itself, as before these threads existed; benchmarks compare with it)
    send_timeout_s: float = 60.0  # a stream whose client reads nothing for this long ends
    # fetches http(s) image URLs (--allow-image-urls); ServerState hands the
    # parsers a ServerImages around it
    image_urls: ImageFetcher | ServerImages | None = None
    stored_responses_bytes: int = 64 << 20  # what /v1/responses keeps for previous_response_id
    # (NAME, MODEL) pairs: a model id a client asks for mapped to a served one
    # (aliases.py; `tandem serve --alias claude-opus-4-8=default`)
    aliases: tuple[tuple[str, str], ...] = ()
    # which turns leave the model's view past the context, where a request
    # does not say (server/overflow.py; `tandem serve --context-overflow`)
    context_overflow: str = "error"


def model_ids(engine, config: ServerConfig) -> tuple[str, ...]:
    """The names requests may use for the served model; the first is its id."""
    if config.model_id:
        return (config.model_id,)
    info = engine.model_info
    name = getattr(info, "name", "") or "model"
    return (name, "default") if info.source == "default" else (name,)


class ServerState:
    """The engine the API serves, its names, what it has in flight, its workers."""

    def __init__(self, engine, config: ServerConfig):
        self.engine, self.ids = engine, model_ids(engine, config)
        check_aliases(config.aliases, self.ids)  # ValueError: one maps to no served model
        # The routes give the body parsers config.image_urls: as ServerImages
        # a text model's request is refused at its first image, none decoded.
        self.config = replace(config, image_urls=ServerImages(
            config.image_urls, lambda: None if engine.capabilities.images
            else cannot_read_images(self.ids[0])))
        self.pieces = TokenPieces(engine.tokenizer)  # logprobs' token texts and bytes
        self.slots = Slots(config.max_in_flight)
        self.pool = (ThreadPoolExecutor(config.workers, thread_name_prefix="api-work")
                     if config.workers > 0 else None)
        # Bulky requests (bodies over BULKY_BYTES, or fetching image URLs) do
        # their work here: a slow image host holds one of these threads up to
        # a request's fetch deadline (30 s), six 4 MB bodies of token ids
        # queue here, never before the workers a plain chat's template and
        # tokenizer need.
        self.bulk = (ThreadPoolExecutor(BULK_WORKERS, thread_name_prefix="api-bulk")
                     if config.workers > 0 else None)

    async def run(self, fn, *args, bulky: bool = False):
        """`fn(*args)` on a worker thread (`bulky`: on the bulky requests'
        threads): never blocks the event loop."""
        pool = self.bulk if bulky else self.pool
        if pool is None:
            return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    async def run_for(self, request: Request, fn, *args):
        """`run` on the threads for `request`'s kind (read_body judged it)."""
        return await self.run(fn, *args, bulky=getattr(request.state, "bulky", False))

    def close(self) -> None:
        for pool in (self.pool, self.bulk):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)


def check_key(request: Request, state: ServerState) -> None:
    """The API key as a bearer token, or in `x-api-key` (Anthropic's clients)."""
    key = state.config.api_key
    given = request.headers.get("authorization")
    if given is None and request.headers.get("x-api-key") is not None:
        given = "Bearer " + request.headers["x-api-key"]
    if key and not key_matches(given, key):
        raise APIError(401, "Invalid or missing API key.", kind="authentication_error",
                       code="invalid_api_key")


def prepare_chat(state: ServerState, job: Completion):
    """On a worker thread: a chat's `prepare` (the template, the tokenizer, a
    grammar's build). A template that refuses `job.messages` (a system message
    inside the conversation, say) is given `job.folded` instead, when the
    body has a fold (messages_body.py); its own refusal is the one reported."""
    engine = state.engine
    if any(m.get("images") for m in job.messages) and not engine.capabilities.images:
        raise APIError(400, cannot_read_images(state.ids[0]), param="messages")
    try:
        try:
            return engine.prepare(job.messages, tools=job.tools, tool_choice=job.tool_choice,
                                  grammar=job.params.grammar)
        except EngineError as e:
            if job.folded is None or not str(e).startswith(TEMPLATE_REFUSED):
                raise
            try:
                return engine.prepare(job.folded, tools=job.tools,
                                      tool_choice=job.tool_choice, grammar=job.params.grammar)
            except EngineError:
                raise e from None
    except EngineError as e:
        raise engine_refusal(e) from None


TEMPLATE_REFUSED = "Cannot apply the chat template"  # engine/prompt.py's words


def engine_refusal(e: EngineError, param: str = "messages") -> APIError:
    """An engine's refusal to prepare or submit, as the API's error: a prompt
    past the context is OpenAI's 400 `context_length_exceeded` (`param`: the
    field that holds it), which the SDKs raise as BadRequestError."""
    if e.kind == "prompt-too-long":
        return APIError(400, str(e), param=param, code="context_length_exceeded")
    if e.kind in ("closed", "lane-failed"):
        return APIError(503, str(e), kind="server_error", headers={"Retry-After": "5"})
    return APIError(400, str(e))


def _submit(state: ServerState, request: Request, job: Completion):
    """On a worker thread: `prepare` (the template, the tokenizer, a grammar's
    build), then `submit`."""
    who = job.user or (request.client.host if request.client else "client")
    if request.url.path not in ("/v1/chat/completions", "/v1/completions"):
        who += f" {request.url.path}"  # the Scheduler dock names the endpoint (Responses...)
    engine = state.engine
    try:
        if job.prompt is not None:  # /v1/completions: the raw prompt, as it is
            prepared = engine.prepare_prompt(job.prompt, grammar=job.params.grammar)
            return engine.submit(prepared, job.params, tab_id=f"api:{who}",
                                 thinking=False)  # raw text: nothing is split out
        prepared, dropped = fitted(engine, job, state.config.context_overflow,
                                   lambda fitting: prepare_chat(state, fitting), folded)
        request.state.context_dropped = dropped  # the response's header (overflow.py)
        return engine.submit(prepared, job.params, tab_id=f"api:{who}")
    except EngineError as e:
        raise engine_refusal(e, "prompt" if job.prompt is not None else "messages") from None


class GuardedStream(StreamingResponse):
    """A stream that gives its slot back and cancels its request however it
    ends: finished, failed, the client gone, or the client reading nothing
    for `send_timeout_s` (its send would otherwise wait forever)."""

    def __init__(self, content, slot: Slot, handle, send_timeout_s: float):
        super().__init__(content, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache"})
        self.slot, self.handle, self.send_timeout_s = slot, handle, send_timeout_s

    async def __call__(self, scope, receive, send):
        async def timed_send(message):
            await asyncio.wait_for(send(message), self.send_timeout_s)

        try:
            await super().__call__(scope, receive, timed_send)
        except (OSError, ClientDisconnect) as exc:  # gone, or stuck (TimeoutError is an OSError)
            if isinstance(exc, TimeoutError) or isinstance(exc.__context__, TimeoutError):
                log.warning("a client read nothing for %.0f s: its stream ended",
                            self.send_timeout_s)
        finally:
            self.handle.cancel()  # no-op once finished
            self.slot.release()


def check_model(state: ServerState, model: str | None) -> str:
    """The served id a request's `model` names (itself, or through an alias);
    404 saying how to map an unknown name."""
    served = state.ids[0] if model is None else resolve(model, state.config.aliases,
                                                          state.ids)
    if served is None:
        name = model if len(model) <= 100 else "NAME"
        raise APIError(404, f"The model '{model[:200]}' does not exist; this server serves "
                       f"{', '.join(repr(i) for i in state.ids)}. To answer to that name, "
                       f"start it with --alias {shlex.quote(name + '=default')} (or a "
                       "pattern, such as "
                       "--alias 'claude-*=default').", param="model", code="model_not_found")
    return served


async def admit(state: ServerState, request: Request, job: Completion):
    """The model checked, a slot taken, the request prepared and submitted:
    (slot, handle). The slot is given back if submitting fails."""
    check_model(state, job.model)
    slot = state.slots.take()
    try:
        return slot, await state.run_for(request, _submit, state, request, job)
    except BaseException:
        slot.release()
        raise


async def collect(request: Request, slot: Slot, handle) -> tuple[Finished, list[Token]]:
    """A whole answer: its `Finished` and the tokens that carry logprobs; a
    client gone cancels it; the slot is given back however it ends."""
    with slot:
        try:
            done, scored = None, []
            async for event in handle:  # the delivery thread wakes this loop
                if await request.is_disconnected():
                    handle.cancel()
                if isinstance(event, Token) and event.logprob is not None:
                    scored.append(event)
                if isinstance(event, Finished):
                    done = event
        finally:
            handle.cancel()  # no-op once finished
    request.state.output_tokens = done.output_tokens  # for the access log
    return done, scored


async def sse(request: Request, handle, dialect):
    """One answer's server-sent events in a dialect's shapes:
    `dialect.start()`, `dialect.token(event)` for each Token and
    `dialect.finished(event)` at the end, each yielding strings. A client
    gone away cancels the request at once. The handle's events are awaited
    on the event loop (the engine's delivery thread wakes it): a stream costs
    no thread."""
    watcher = asyncio.create_task(watch_disconnect(request, handle))
    try:
        for chunk in dialect.start():
            yield chunk
        async for event in handle:
            if isinstance(event, Token):
                for chunk in dialect.token(event):
                    yield chunk
            elif isinstance(event, Finished):
                request.state.output_tokens = event.output_tokens  # for the access log
                for chunk in dialect.finished(event):
                    yield chunk
    finally:
        watcher.cancel()
        handle.cancel()  # no-op once finished


async def watch_disconnect(request: Request, handle) -> None:
    """Cancel `handle`'s request once its client is gone (a task: cancel it
    when the answer is done)."""
    while True:
        if await request.is_disconnected():
            handle.cancel()
            return
        await asyncio.sleep(0.05)
