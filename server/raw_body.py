"""A request body as bytes, bounded before any work it would cost: its size
by kind as it streams in (text at most MAX_BODY_BYTES; only images' inline
data may take a body past that), its nesting, then JSON, then text that is
text (no unpaired surrogate anywhere). Every scan here runs at C speed (the
regular-expression engine, bytes methods, numpy): a 64 MiB body costs tens
of milliseconds, never a parse thread's minute."""

from __future__ import annotations

import json
import re

import numpy as np
from starlette.requests import Request

from engine import strict_loads

from .errors import APIError

MAX_BODY_BYTES = 4 << 20
# A request carrying images (data: URLs, base64 sources) may be this large: a
# few phone photos (issue 37). Everything in it but the images' data is still
# held to MAX_BODY_BYTES, checked before it is parsed.
MAX_IMAGE_BODY_BYTES = 64 << 20
MAX_NESTING = 64  # JSON deeper than this is refused before it is parsed

# An image's inline data as the dialects carry it: a data: URL (chat's
# image_url.url, Responses' image_url) or bare base64 (Anthropic's
# source.data), under its key. Short strings never count: below 4 KiB the
# allowance cannot matter. The tail may be cut where a body is still arriving.
_IMAGE_DATA = re.compile(
    rb'"(?:url|image_url|data)"\s*:\s*"(?:data:image/[A-Za-z0-9.+-]{1,40}'
    rb'(?:;[A-Za-z0-9=.-]{1,40}){0,4},)?[A-Za-z0-9+/=\\]{4096,}(?:"|\Z)')
_URL = re.compile(rb'"(?:url|image_url)"\s*:\s*"\s*https?:', re.IGNORECASE)
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")  # deleted by translate
# A lone surrogate can come as an escape (\udXXX) or as raw bytes (json
# decodes bytes with surrogatepass): where neither appears, no string is walked.
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


BULKY_BYTES = 256 << 10  # a body over this is parsed and prepared on the bulky threads


def bulky(data: bytes) -> bool:
    """Whether a body's work may be long: over BULKY_BYTES, or naming an
    http(s) image URL to fetch (server/flow.py runs it on threads of its
    own). A false match costs nothing but the thread it runs on."""
    return len(data) > BULKY_BYTES or _URL.search(data) is not None


def too_large(limit: int) -> APIError:
    if limit <= MAX_BODY_BYTES:
        return APIError(413, f"Request body over {limit >> 20} MiB.")
    return APIError(413, f"Request body over {MAX_BODY_BYTES >> 20} MiB: only images' "
                    f"data may take a request past that, up to {limit >> 20} MiB.")


def beyond_images(data: bytes) -> int:
    """The body's bytes outside images' inline data (what MAX_BODY_BYTES holds)."""
    return len(data) - sum(m.end() - m.start() for m in _IMAGE_DATA.finditer(data))


def check_size(data: bytes, limit: int) -> None:
    """413 unless the body is within `limit` and, past MAX_BODY_BYTES, what is
    not images' data is within MAX_BODY_BYTES."""
    if len(data) > limit:
        raise too_large(limit)
    if len(data) > MAX_BODY_BYTES and beyond_images(data) > MAX_BODY_BYTES:
        raise too_large(limit)


def check_images_carried(data: bytes, messages, tools=None) -> None:
    """A body past MAX_BODY_BYTES must have carried images (parsed:
    `messages`), and what it carries besides them (the messages' text and
    calls, the tools offered) is still held to MAX_BODY_BYTES: a string under
    an image-like key that was no image counts here, before any tokenizing."""
    if len(data) <= MAX_BODY_BYTES:
        return
    if not any(m.get("images") for m in messages or ()):
        raise too_large(MAX_IMAGE_BODY_BYTES)
    plain = [{k: v for k, v in m.items() if k not in ("images", "parts")} for m in messages]
    if len(json.dumps([plain, tools or []], ensure_ascii=False, default=str)) > MAX_BODY_BYTES:
        raise too_large(MAX_IMAGE_BODY_BYTES)


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The body, refused with 413 as soon as it passes `limit`, or passes
    MAX_BODY_BYTES with more than that outside images' data (checked each
    time the body doubles past MAX_BODY_BYTES: linear work in all)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks, size, next_check = [], 0, MAX_BODY_BYTES
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
        if size > next_check:
            chunks = [b"".join(chunks)]
            if beyond_images(chunks[0]) > MAX_BODY_BYTES:
                raise too_large(limit)
            next_check = 2 * size
    data = b"".join(chunks)
    request.state.bulky = bulky(data)  # which threads its work runs on (flow.py)
    return data


def nesting(data: bytes) -> int:
    """The deepest bracket nesting, brackets inside strings aside (checked
    before json.loads, so that it never recurses out of the stack)."""
    if data.count(b"[") + data.count(b"{") <= MAX_NESTING:
        return 0
    brackets = _STRING.sub(b"", data).translate(None, _BRACKETS)
    if not brackets:
        return 0
    steps = np.frombuffer(brackets, np.uint8)
    depth = np.cumsum(np.where((steps == 0x5B) | (steps == 0x7B), 1, -1), dtype=np.int64)
    return int(depth.max())


def parse_json(data: bytes, limit: int = MAX_BODY_BYTES) -> dict:
    """The body as a JSON object: size, nesting, JSON and text checked, each a
    4xx that says what is wrong."""
    check_size(data, limit)
    if nesting(data) > MAX_NESTING:
        raise APIError(400, f"The body is nested more than {MAX_NESTING} levels deep.")
    try:
        body = strict_loads(data or b"{}")
    except (ValueError, RecursionError) as e:
        # NaN, Infinity and numbers out of range are refused too: nothing
        # answered or echoed later can hold one (JSON cannot write it).
        why = f" ({e})" if "number" in str(e) else ""
        raise APIError(400, f"The body is not valid JSON{why}.") from None
    if not isinstance(body, dict):
        raise APIError(400, "The body must be a JSON object.")
    if _SURROGATE.search(data):
        found = _lone_surrogate(body, "")
        if found is not None:
            where, in_name = found
            what = (f"A field name{' in ' + where if where else ''}" if in_name else where)
            raise APIError(400, f"{what} is not valid text (an unpaired surrogate).",
                           param=where or None)
    return body


def _lone_surrogate(value, path: str) -> tuple[str, bool] | None:
    """Where the first string that is not valid text is, and whether it is a
    field name there."""
    if isinstance(value, str):
        return None if is_text(value) else (path, False)
    if isinstance(value, dict):
        for key, item in value.items():
            if not is_text(key):
                return path, True
            found = _lone_surrogate(item, f"{path}.{key}" if path else key)
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _lone_surrogate(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def is_text(value: str) -> bool:
    """False for a string holding a lone surrogate (what JSON escapes allow)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True
