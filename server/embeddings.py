"""POST /v1/embeddings (issue 35): OpenAI's embeddings endpoint on the
engine's embedding model (`tandem serve --embedding-model M`). `input` is a
string, a list of strings, a list of token ids or a list of such lists (at
most 2,048 inputs, 300,000 tokens); `encoding_format` float or base64
(little-endian float32, as OpenAI's clients decode it); `dimensions` cuts
each vector to its first N values and normalizes them again (meaningful for
models trained for it, Matryoshka-style). The request is placed on a lane
like any other (engine/embeddings.py) and awaited on the event loop. It holds
a slot (`in_flight`) until no lane runs it any more, and a client that
leaves cancels it: the lane runs none of its slices left (issue 47)."""

from __future__ import annotations

import asyncio
import base64

import numpy as np
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from engine import EngineError

from .flow import ServerState, check_key, read_body, watch_disconnect
from .bodies import _is_text, _optional, parse_json
from .errors import APIError

FIELDS = {"model", "input", "encoding_format", "dimensions", "user"}
MAX_INPUTS = 2048


def _inputs(value) -> list:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise APIError(400, "input must be a string, a list of strings or token ids.",
                       param="input")
    if set(map(type, value)) == {int}:
        value = [value]  # one input of token ids
    if len(value) > MAX_INPUTS:
        raise APIError(400, f"input holds {len(value):,} items; at most {MAX_INPUTS:,} per "
                            "request.", param="input")
    for i, item in enumerate(value):
        text_ok = isinstance(item, str) and item and _is_text(item)
        ids_ok = (isinstance(item, list) and item and set(map(type, item)) == {int}
                  and min(item) >= 0)  # map and min at C speed: 2,048 x 1,000 ids
        if not (text_ok or ids_ok):
            raise APIError(400, f"input[{i}] must be non-empty text or a list of token ids.",
                           param=f"input[{i}]")
    return value


def _parse(data: bytes, dims: int | None) -> tuple[list, str, int | None, str | None]:
    body = parse_json(data)
    for name in body:
        if name not in FIELDS:
            raise APIError(400, f"Unrecognized request argument: {name}.", param=name)
    fmt = _optional(body, "encoding_format", str, "float")
    if fmt not in ("float", "base64"):
        raise APIError(400, "encoding_format must be float or base64.",
                       param="encoding_format")
    size = body.get("dimensions")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int)
                             or not 1 <= size <= (dims or 0)):
        raise APIError(400, f"dimensions must be from 1 to {dims} for this model.",
                       param="dimensions")
    return _inputs(body.get("input")), fmt, size, _optional(body, "model", str, None)


async def embeddings_route(state: ServerState, request: Request) -> Response:
    check_key(request, state)
    engine = state.engine
    model = getattr(getattr(engine, "embedder", None), "model", None)
    if model is None:
        raise APIError(400, "This server has no embedding model: start it with "
                            "`tandem serve --embedding-model M` (a BERT-style model folder or "
                            "repo id, e.g. sentence-transformers/all-MiniLM-L6-v2), or set "
                            "one in the app's Local server settings.",
                       code="no_embedding_model")
    data = await read_body(request)
    inputs, fmt, size, name = await state.run_for(request, _parse, data, model.dims)
    if name is not None and name not in (model.name, model.source):
        raise APIError(404, f"The model '{name}' is not this server's embedding model "
                            f"('{model.name}').", param="model", code="model_not_found")
    who = request.client.host if request.client else "client"
    slot = state.slots.take()
    try:
        handle = await state.run_for(request, engine.embed, inputs,
                                     f"api:{who} /v1/embeddings")
    except BaseException as e:
        slot.release()
        if isinstance(e, EngineError):
            raise APIError(503 if e.kind == "closed" else 400, str(e)) from None
        raise
    done = await _until_gone(request, handle, slot)
    vectors = np.asarray(done, dtype=np.float32)
    if size is not None:
        vectors = vectors[:, :size]
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)
    data = [{"object": "embedding", "index": i,
             "embedding": (base64.b64encode(v.astype("<f4").tobytes()).decode()
                           if fmt == "base64" else v.tolist())}
            for i, v in enumerate(vectors)]
    tokens = handle.job.tokens  # those embedded: an input is cut to the model's max_tokens
    request.state.embedded_tokens = tokens  # for the access log
    return JSONResponse({"object": "list", "data": data, "model": model.name,
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


async def _until_gone(request: Request, handle, slot):
    """The vectors, once no lane runs the request any more; the slot is given
    back then, however it ends (this task cancelled too). A client gone
    cancels it: 499 once its running slice has ended."""
    loop = asyncio.get_running_loop()
    gone = loop.create_future()

    def left(job) -> None:  # on the lane's thread
        slot.release()
        try:
            loop.call_soon_threadsafe(lambda: gone.done() or gone.set_result(None))
        except RuntimeError:  # the loop has closed: nobody waits
            pass

    handle.when_gone(left)
    watcher = asyncio.create_task(watch_disconnect(request, handle))
    try:
        await gone
    finally:
        watcher.cancel()
        handle.cancel()  # no-op once finished
    future = handle.job.future
    if future.cancelled():
        raise ClientDisconnect()
    try:
        return future.result()
    except EngineError as e:
        raise APIError(503 if e.kind == "closed" else 400, str(e)) from None
