"""What a remote server sends is checked (engine/remote/client.py): hostile
or broken streams are faults with a kind, never a hang, a crash or a
buffer that grows without end. httpx's MockTransport plays the server."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from engine.remote.client import MAX_LINE, RemoteFault, list_models, stream_completion


class Forever:
    """A server that sends `part` again and again, every `pace_s` (its pace,
    not the test's; 0: as fast as it can, never pausing)."""

    def __init__(self, part: bytes, pace_s: float = 0.05):
        self.part, self.pace_s = part, pace_s


KEEP_ALIVE_FOREVER = Forever(b": keep-alive\n\n")  # never anything more
# "Forever" is this long: a stream that the code under test fails to end
# then ends by itself (a cut, not the fault a test expects), not in a hang.
GUARD_S = 30


def _client(handler) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


def _event(text="", finish=None, usage=None) -> bytes:
    data = {"choices": [{"text": text, "finish_reason": finish}]}
    if usage is not None:
        data = {"choices": [], "usage": usage}
    return f"data: {json.dumps(data)}\n\n".encode()


def _run(body_parts, first_s=2.0, stall_s=0.3, max_chars=10_000, status=200, headers=None,
         total_s=None):
    async def parts():
        for part in body_parts:
            if isinstance(part, Forever):
                end = time.monotonic() + GUARD_S
                while time.monotonic() < end:
                    yield part.part
                    if part.pace_s:  # the server's pace, not a wait
                        await asyncio.sleep(part.pace_s)
            else:
                yield part

    async def handler(request):
        sent = json.loads(request.content)
        assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
        return httpx.Response(status, headers=headers or {}, content=parts())

    async def main():
        async with _client(handler) as client:
            return [c async for c in stream_completion(
                client, "http://remote/v1", "k", {"prompt": [1, 2]}, first_s, stall_s,
                max_chars, **({"total_s": total_s} if total_s is not None else {}))]

    return asyncio.run(main())


def _fault(*args, **kwargs) -> RemoteFault:
    with pytest.raises(RemoteFault) as e:
        _run(*args, **kwargs)
    return e.value


def test_a_good_stream_with_its_usage():
    chunks = _run([_event("Hel"), _event("lo", "stop"),
                   _event(usage={"prompt_tokens": 9, "completion_tokens": 2,
                                 "prompt_tokens_details": {"cached_tokens": 4}}),
                   b"data: [DONE]\n\n"])
    assert "".join(c.text for c in chunks) == "Hello"
    assert chunks[1].finish_reason == "stop" and chunks[-1].cached_tokens == 4


@pytest.mark.parametrize("parts,kind,words", [
    ([_event("Hi")], "cut", "ended before"),
    ([b"data: {not json\n\n"], "garbage", "not JSON"),
    ([b'data: {"choices": [{"text": 5}]}\n\n'], "garbage", "not a string"),
    ([b"<html>oops</html>\n"], "garbage", "not a server-sent event"),
    ([b'data: {"error": {"message": "out of memory"}}\n\n'], "http", "out of memory"),
    ([b"x" * (MAX_LINE + 10)], "garbage", "over 1 MiB"),
    ([b"data: " + b"y" * (MAX_LINE + 10) + b"\n\n"], "garbage", "over 1 MiB"),
])
def test_broken_streams_are_faults(parts, kind, words):
    fault = _fault(parts)
    assert fault.kind == kind and words in str(fault)


def test_more_text_than_max_tokens_allows_is_garbage():
    fault = _fault([_event("a" * 600), _event("b" * 600, "stop")], max_chars=1000)
    assert fault.kind == "garbage"


def test_keep_alives_do_not_keep_a_silent_server_alive():
    """Comments every 50 ms, forever, never another event: it still times out
    (stall_s after the last event), whatever the machine's load."""
    fault = _fault([_event("Hi"), KEEP_ALIVE_FOREVER], first_s=2.0, stall_s=0.3)
    assert fault.kind == "timeout" and "silent" in str(fault)


def test_status_codes_say_what_to_do():
    busy = _fault([], status=429, headers={"retry-after": "7"})
    assert busy.kind == "busy" and busy.retry_after_s == 7
    assert _fault([], status=401).kind == "auth"
    assert _fault([], status=404).kind == "model"
    assert _fault([], status=400).kind == "prompt"
    assert _fault([], status=502).kind == "http"
    assert _fault([], status=302, headers={"location": "http://elsewhere/"}).kind == "http"


def test_the_model_list_and_a_refused_connection():
    async def models(request):
        assert request.headers["authorization"] == "Bearer secret"
        return httpx.Response(200, json={"data": [{"id": "a"}, {"id": "b"}, "junk"]})

    async def main(handler):
        async with _client(handler) as client:
            return await list_models(client, "http://remote/v1", "secret", 2.0)

    assert asyncio.run(main(models)) == ["a", "b"]

    def refuse(request):
        raise httpx.ConnectError("Connection refused")

    with pytest.raises(RemoteFault) as e:
        asyncio.run(main(refuse))
    assert e.value.kind == "refused" and "secret" not in str(e.value)


@pytest.mark.parametrize("endless", [
    Forever(_event(""), 0.01),  # empty text, at a pace
    Forever(_event(usage={"prompt_tokens": 2, "completion_tokens": 1}), 0.01),  # usage only
    Forever(_event(""), 0),  # empty text, a flood that never lets the loop run anything else
], ids=["empty", "usage-only", "flood"])
def test_chunks_without_text_are_not_progress(endless):
    """Only text moves the stall deadline on: a server that streams events
    with no text forever times out stall_s after its last text."""
    fault = _fault([_event("Hi"), endless], first_s=2.0, stall_s=0.3)
    assert fault.kind == "timeout" and "no text" in str(fault)


@pytest.mark.parametrize("endless", [Forever(_event(""), 0.01), KEEP_ALIVE_FOREVER],
                         ids=["empty", "keep-alive"])
def test_a_finished_answer_followed_by_endless_nothing_ends_as_it_finished(endless):
    """A finish reason, then no [DONE] but empty events or keep-alives
    forever: the answer is whole, so the stream ends there (a fault would
    have sent it on to a local lane, which would have written more)."""
    chunks = _run([_event("Hi"), _event(" there", finish="stop"), endless], stall_s=0.3)
    assert "".join(c.text for c in chunks) == "Hi there"
    assert any(c.finish_reason == "stop" for c in chunks)


def test_an_endless_trickle_of_text_ends_at_the_overall_deadline():
    """Text every 10 ms, forever, within every per-event limit: only the
    request's overall deadline can end it."""
    fault = _fault([Forever(_event("a"), 0.01)], stall_s=5.0, max_chars=10 ** 9, total_s=0.3)
    assert fault.kind == "timeout" and "deadline" in str(fault)


def test_a_flooding_stream_can_be_cancelled():
    """A cancel is never swallowed by a read that completes meanwhile (it
    was, with asyncio.wait_for on Python 3.11: the lane's close then waited
    out its timeout with the stream still running)."""
    ended = False

    async def flood():
        while not ended:  # ends with the test, so that a failure cannot hang it
            yield _event("")
            await asyncio.sleep(0)  # the server's pace: it lets the loop run

    async def main():
        reading = asyncio.Event()

        async def read(client):
            async for _ in stream_completion(client, "http://remote/v1", "k", {}, 30, 30,
                                             10_000):
                reading.set()

        nonlocal ended
        async with _client(lambda request: httpx.Response(200, content=flood())) as client:
            try:
                for _ in range(20):
                    task = asyncio.create_task(read(client))
                    await reading.wait()
                    reading.clear()
                    task.cancel()
                    done, _ = await asyncio.wait({task}, timeout=10)
                    assert task in done and task.cancelled()
            finally:
                ended = True

    asyncio.run(main())


def test_an_error_body_that_never_ends_is_read_no_further_than_its_start():
    pulled = []

    async def endless():  # an error page that goes on forever
        yield b'{"error": {"message": "overloaded"'
        while len(pulled) < 100_000:  # an end, should the client read on
            pulled.append(1)
            yield b" " * 100
            await asyncio.sleep(0)

    async def main():
        async with _client(lambda request: httpx.Response(500, content=endless())) as client:
            async for _ in stream_completion(client, "http://remote/v1", "k", {}, 30, 30, 100):
                pass

    with pytest.raises(RemoteFault) as e:
        asyncio.run(main())
    assert e.value.kind == "http" and len(pulled) < 100  # 4 KiB, not the whole body
