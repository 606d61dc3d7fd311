"""An OpenAI-compatible server's /v1/completions, streamed, over httpx.

Everything the remote sends is checked: a status other than 200, a stream
that ends without a finish reason, a line that is not an event, JSON that is
not a completion chunk, text that is not a string, or more text than the
request allows are `RemoteFault`s with a kind the lane acts on ("busy" for
429, "refused", "timeout", "http", "cut", "garbage", "auth", "model").
Redirects are not followed (an API key must not travel to another host).
No error message carries the key: the lane scrubs every fault's text
(engine/core/remote_limits.py `scrub`, in RemoteLane._fault).

Progress is text: only a chunk that carries text or reasoning moves the
stall deadline on (empty or usage-only chunks, comments and keep-alives do
not), and `total_s` ends the whole answer, however it streams. Waits use
`asyncio.timeout`, not `asyncio.wait_for`: on Python 3.11 wait_for swallows a
cancel that arrives as its read completes, so a remote flooding events could
not be cancelled (removing it took the lane's 10 s close timeout).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import AsyncIterator

import httpx

MAX_LINE = 1 << 20  # one event's bytes
MAX_ERROR_TEXT = 300
MAX_ERROR_BODY = 4096  # bytes of an error response read


class RemoteFault(Exception):
    def __init__(self, kind: str, message: str, retry_after_s: float | None = None):
        super().__init__(message)
        self.kind = kind
        self.retry_after_s = retry_after_s


@dataclass(slots=True)
class Chunk:
    text: str = ""
    reasoning: str = ""  # chat completions: a reasoning model's `reasoning_content`
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None


def make_client(connect_s: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=httpx.Timeout(connect_s, read=None, write=connect_s,
                                                   pool=None),
                             follow_redirects=False, trust_env=False,
                             limits=httpx.Limits(max_connections=None,
                                                 max_keepalive_connections=64))


def _headers(key: str | None) -> dict[str, str]:
    headers = {"Accept": "text/event-stream", "Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return headers


def _retry_after(response: httpx.Response) -> float | None:
    try:
        value = float(response.headers.get("retry-after", ""))
    except ValueError:
        return None
    return value if 0 <= value <= 3600 else None


async def _status_fault(response: httpx.Response, timeout_s: float) -> RemoteFault:
    # Its first MAX_ERROR_BODY bytes, within timeout_s: an error body that
    # never ends must not hang the lane nor fill memory.
    raw = b""
    try:
        async with asyncio.timeout(timeout_s):
            async for piece in response.aiter_bytes():
                raw += piece
                if len(raw) >= MAX_ERROR_BODY:
                    break
    except Exception:
        pass
    try:
        body = raw[:MAX_ERROR_BODY].decode("utf-8", "replace")
        message = json.loads(body).get("error", {}).get("message", body)
    except Exception:
        message = ""
    message = str(message)[:MAX_ERROR_TEXT]
    code = response.status_code
    kind = ("busy" if code == 429 else "auth" if code in (401, 403) else
            "model" if code == 404 else "prompt" if code in (400, 422) else "http")
    return RemoteFault(kind, f"HTTP {code}" + (f": {message}" if message else ""),
                       _retry_after(response) if code in (429, 503) else None)


def _transport_fault(exc: Exception) -> RemoteFault:
    if isinstance(exc, httpx.ConnectError):  # refused, no route, a certificate it failed
        detail = str(exc)[:MAX_ERROR_TEXT] or "connection refused"
        return RemoteFault("refused", f"cannot connect: {detail}")
    if isinstance(exc, httpx.TimeoutException):
        return RemoteFault("timeout", "timed out")
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
        return RemoteFault("cut", "the connection closed mid-answer")
    return RemoteFault("refused", f"{type(exc).__name__}")


async def list_models(client: httpx.AsyncClient, base: str, key: str | None,
                      timeout_s: float) -> list[str]:
    """The model ids the server lists (GET /v1/models)."""
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.get(f"{base}/models", headers=_headers(key))
    except TimeoutError:
        raise RemoteFault("timeout", "no answer to /v1/models") from None
    except httpx.HTTPError as exc:
        raise _transport_fault(exc) from None
    if response.status_code != 200:
        raise await _status_fault(response, timeout_s)
    try:
        data = response.json()["data"]
        return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]
    except Exception:
        raise RemoteFault("garbage", "/v1/models did not answer a model list") from None


def _parse_event(line: str, chat: bool = False) -> Chunk | None:
    """One `data: {...}` line as a chunk; None for [DONE]."""
    payload = line[5:].strip()
    if payload == "[DONE]":
        return None
    try:
        data = json.loads(payload)
    except ValueError:
        raise RemoteFault("garbage", "an event that is not JSON") from None
    if not isinstance(data, dict):
        raise RemoteFault("garbage", "an event that is not a JSON object")
    if "error" in data:
        error = data["error"]
        message = error.get("message", "") if isinstance(error, dict) else str(error)
        raise RemoteFault("http", f"error mid-answer: {str(message)[:MAX_ERROR_TEXT]}")
    chunk = Chunk()
    choices = data.get("choices")
    if not isinstance(choices, list) or len(choices) > 1:
        raise RemoteFault("garbage", "a chunk without a choices list")
    if choices:
        choice = choices[0]
        if not isinstance(choice, dict):
            raise RemoteFault("garbage", "a choice that is not a JSON object")
        reason = choice.get("finish_reason")
        if chat:  # {"delta": {"content": ..., "reasoning_content": ...}}
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise RemoteFault("garbage", "a delta that is not a JSON object")
            text = delta.get("content") or ""
            thought = delta.get("reasoning_content") or delta.get("reasoning") or ""
        else:
            text, thought = choice.get("text", ""), ""
        if not (isinstance(text, str) and isinstance(thought, str)) or not (
                reason is None or isinstance(reason, str)):
            raise RemoteFault("garbage", "a chunk whose text is not a string")
        chunk.text, chunk.reasoning, chunk.finish_reason = text, thought, reason
    usage = data.get("usage")
    if isinstance(usage, dict):
        chunk.prompt_tokens = _count(usage.get("prompt_tokens"))
        chunk.completion_tokens = _count(usage.get("completion_tokens"))
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            chunk.cached_tokens = _count(details.get("cached_tokens"))
    return chunk


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


async def _lines(response: httpx.Response) -> AsyncIterator[str]:
    """The body's lines, none longer than MAX_LINE (httpx's own line reader
    would hold a newline-less body of any size in memory)."""
    buffer = ""
    async for text in response.aiter_text():
        buffer += text
        *lines, buffer = buffer.split("\n")
        for line in lines:
            if len(line) > MAX_LINE:
                raise RemoteFault("garbage", "an event over 1 MiB")
            yield line.rstrip("\r")
        if len(buffer) > MAX_LINE:
            raise RemoteFault("garbage", "an event over 1 MiB")
    if buffer:
        yield buffer.rstrip("\r")


async def stream_completion(client: httpx.AsyncClient, base: str, key: str | None,
                            body: dict, first_s: float, stall_s: float,
                            max_chars: int, chat: bool = False,
                            total_s: float | None = None) -> AsyncIterator[Chunk]:
    """POST /v1/completions (`chat`: /v1/chat/completions) with stream on;
    yield its chunks until the one that carries the finish reason (and the
    usage chunk after it, if any). Faults: no text for `first_s` at first or
    `stall_s` after the last text, or no end within `total_s` (all "timeout")."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    path = "chat/completions" if chat else "completions"
    request = client.build_request("POST", f"{base}/{path}", headers=_headers(key),
                                   json=body)
    loop = asyncio.get_running_loop()
    start = loop.time()
    pace = _Pace(loop, total_s, wait=first_s, stall_at=start + first_s,
                 end_at=start + total_s if total_s is not None else float("inf"))
    try:
        async with asyncio.timeout_at(pace.deadline):
            response = await client.send(request, stream=True)
    except TimeoutError:
        raise pace.timeout() from None
    except httpx.HTTPError as exc:
        raise _transport_fault(exc) from None
    lines = _lines(response)
    try:
        if response.status_code != 200:
            raise await _status_fault(response, first_s)
        while (line := await pace.next_line(lines)) is not None:
            if not _is_data(line):
                continue
            chunk = _parse_event(line, chat)
            if chunk is None:
                break
            pace.advance(chunk, stall_s, max_chars)
            yield chunk
        if not pace.finished:
            raise RemoteFault("cut", "the stream ended before the answer did")
    finally:
        await lines.aclose()
        await response.aclose()


def _is_data(line: str) -> bool:
    """Whether `line` is a `data:` event; blank lines, keep-alive comments and
    the other fields are skipped, anything else is garbage."""
    if not line.strip() or line.startswith(":"):
        return False  # keep-alive comments
    if not line.startswith("data:"):
        if line.startswith(("event:", "id:", "retry:")):
            return False
        raise RemoteFault("garbage", "a line that is not a server-sent event")
    return True


@dataclass(slots=True)
class _Pace:
    """An answer's deadlines: `stall_at` moves on with text only (`wait`
    after it), `end_at` (`total_s` after the request) never moves."""
    loop: asyncio.AbstractEventLoop
    total_s: float | None
    wait: float
    stall_at: float
    end_at: float
    chars: int = 0
    finished: bool = False  # a finish reason came: only its trailer may follow

    @property
    def deadline(self) -> float:
        return min(self.stall_at, self.end_at)

    def timeout(self) -> RemoteFault:
        """The fault for a deadline passed now."""
        return _timeout(self.loop.time() >= self.end_at, self.total_s, self.wait,
                        self.chars > 0)

    async def next_line(self, lines: AsyncIterator[str]) -> str | None:
        """The next line before the deadline; None when the stream ends, or
        when it goes quiet past the deadline after a finish reason."""
        # Checked here too: a flood of events may never suspend this task,
        # so the timeout below could not fire.
        if self.loop.time() >= self.deadline:
            if self.finished:  # the answer ended; only its trailer is late
                return None
            raise self.timeout()
        try:
            async with asyncio.timeout_at(self.deadline):
                return await anext(lines)
        except StopAsyncIteration:
            return None
        except TimeoutError:
            if self.finished:  # a finish reason, then silence or empty events: it ended
                return None
            raise self.timeout() from None
        except httpx.HTTPError as exc:
            raise _transport_fault(exc) from None

    def advance(self, chunk: Chunk, stall_s: float, max_chars: int) -> None:
        """Count a chunk: text moves the stall deadline on (empty chunks keep
        nothing alive); more text than `max_chars` in all is garbage."""
        if chunk.text or chunk.reasoning:
            self.wait = stall_s
            self.stall_at = self.loop.time() + stall_s
        self.chars += len(chunk.text) + len(chunk.reasoning)
        if self.chars > max_chars:
            raise RemoteFault("garbage", "more text than max_tokens allows")
        self.finished = self.finished or chunk.finish_reason is not None


def _timeout(overall: bool, total_s: float | None, wait: float, mid: bool) -> RemoteFault:
    if overall:
        return RemoteFault("timeout", f"no end of the answer within {total_s:.0f} s "
                                      "(its deadline for max_tokens)")
    return RemoteFault("timeout", f"silent (no text) for {wait:.0f} s mid-answer" if mid
                       else f"no answer within {wait:.0f} s")
