"""Request bodies bounded before they are parsed (issue 47, #2): a body is
held to 4 MiB as it streams in unless images' inline data takes it further;
it is checked whole before json.loads; bulky bodies are marked for threads
of their own; the nesting scan runs at C speed and agrees with the
byte-by-byte one it replaced. A real Starlette request fed in chunks."""

from __future__ import annotations

import asyncio
import base64
import io
import json

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st
from starlette.requests import Request

from server.errors import APIError
from server.raw_body import (MAX_BODY_BYTES, MAX_IMAGE_BODY_BYTES, MAX_NESTING,
                             check_images_carried, nesting, parse_json, read_body)


def _png_b64(size=(64, 64)) -> str:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode()


# ---- bodies bounded by kind, before parsing ---------------------------------------------
def _request(chunks: list[bytes], read: list[int]) -> Request:
    """A real Starlette request whose body arrives in `chunks`; `read` counts
    how many bytes the server pulled."""
    pending = list(chunks)

    async def receive():
        if not pending:
            return {"type": "http.request", "body": b"", "more_body": False}
        chunk = pending.pop(0)
        read.append(len(chunk))
        return {"type": "http.request", "body": chunk, "more_body": bool(pending)}

    scope = {"type": "http", "method": "POST", "path": "/v1/responses", "headers": [],
             "query_string": b""}
    return Request(scope, receive)


def _chunks(data: bytes, size=1 << 16) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


def _read(data: bytes, limit=MAX_IMAGE_BODY_BYTES) -> tuple[bytes | APIError, int]:
    read: list[int] = []
    try:
        return asyncio.run(read_body(_request(_chunks(data), read), limit)), sum(read)
    except APIError as e:
        return e, sum(read)


def test_a_text_body_is_refused_at_4_mib_as_it_streams_in():
    """Issue 47 #2: 60 MB of `[]` was read whole, scanned byte by byte in
    Python and parsed (34 s, +1.4 GB). Now the read stops just past 4 MiB."""
    junk = b'{"input": [' + b"[]," * (20 << 20) + b"[]]}"
    refused, read = _read(junk)
    assert isinstance(refused, APIError) and refused.status == 413
    assert "only images' data" in refused.message
    assert read <= MAX_BODY_BYTES + (1 << 16)
    # an image's base64 may take a body past it: read whole, then parsed
    image = _png_b64()
    big = json.dumps({"input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "data:image/png;base64," + image
         + "A" * (6 << 20)}]}]}).encode()
    body, read = _read(big)
    assert body == big and read == len(big)
    # an image first, then junk: refused by the next check (the body doubled)
    mixed = big[:-4] + b'"}], "x": [' + b"[]," * (8 << 20) + b"[]]}"
    refused, read = _read(mixed)
    assert isinstance(refused, APIError) and refused.status == 413
    # at the latest when the body has doubled past where the junk passed 4 MiB
    assert read <= 2 * (len(big) + MAX_BODY_BYTES) + (1 << 16) < len(mixed)
    # a text-only route never passes 4 MiB
    refused, read = _read(big, MAX_BODY_BYTES)
    assert isinstance(refused, APIError) and read <= MAX_BODY_BYTES + (1 << 16)


def test_bulky_bodies_are_marked_for_their_own_threads():
    """Big bodies and image URLs to fetch do their work on the server's bulky
    threads (flow.py), never queued before a plain chat's."""
    small = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
    url = json.dumps({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]}).encode()
    big = json.dumps({"input": [[1] * 1000] * 200}).encode()
    for data, expected in ((small, False), (url, True), (big, True)):
        request = _request(_chunks(data), [])
        assert asyncio.run(read_body(request)) == data
        assert request.state.bulky is expected


def test_a_big_body_is_checked_whole_before_it_is_parsed():
    image = "data:image/png;base64," + "A" * (8 << 20)
    ok = json.dumps({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": image}}]}]}).encode()
    assert parse_json(ok, MAX_IMAGE_BODY_BYTES)["messages"]
    hidden = ok[:-2] + b', "junk": [' + b"[]," * (2 << 20) + b"[]]}"
    with pytest.raises(APIError, match="only images' data") as refused:
        parse_json(hidden, MAX_IMAGE_BODY_BYTES)
    assert refused.value.status == 413
    # an Anthropic base64 source counts as image data too
    claude = json.dumps({"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "A" * (8 << 20)}}]}]}).encode()
    assert parse_json(claude, MAX_IMAGE_BODY_BYTES)["messages"]


def _nesting_reference(data: bytes) -> int:
    """The byte-by-byte scan the server ran before (kept here as the oracle)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab'),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(alphabet='[]{}"\\ab', max_size=4), inner,
                                       max_size=3), max_leaves=40)


@seed(47)
@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(value=_JSON, wrap=st.integers(0, 80))
def test_the_fast_nesting_scan_equals_the_byte_by_byte_one(value, wrap):
    data = b"[" * wrap + json.dumps(value).encode() + b"]" * wrap
    expected = _nesting_reference(data)
    assert nesting(data) == expected or (expected <= MAX_NESTING and nesting(data) == 0)


def test_what_a_big_body_carries_besides_its_images_is_held_to_4_mib():
    """A string under an image-like key that was no image (a tool input's
    "data") passes the pre-parse scan; once parsed, the text and tools a
    request carries beside its images are held to 4 MiB before tokenizing."""
    data = b"x" * (8 << 20)  # the body's size: past 4 MiB
    image = object()  # a read image (engine/images.ChatImage)
    small = [{"role": "user", "content": "What is it?", "images": [image], "parts": []}]
    check_images_carried(data, small, [{"type": "function"}])
    with pytest.raises(APIError, match="only images' data"):
        check_images_carried(data, [{"role": "user", "content": "hi"}])  # no image at all
    hidden = small + [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f",
                                                     "arguments": {"data": "A" * (6 << 20)}}}]}]
    with pytest.raises(APIError, match="only images' data"):
        check_images_carried(data, hidden)
    with pytest.raises(APIError, match="only images' data"):
        check_images_carried(data, small, [{"description": "A" * (5 << 20)}])
