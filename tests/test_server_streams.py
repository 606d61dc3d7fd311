"""Streamed API requests cost no thread each: the server awaits a request's
handle on its event loop (`async for event in handle`), woken by the engine's
delivery thread, instead of a thread per stream reading it.

The clients run in a process of their own (the official async openai client,
on one event loop), so every thread counted here is the server's or the
engine's."""

import json
import subprocess
import sys
import threading

from engine import Finished, LaneConfig, LaneSpec
from tests.test_server import Served

N = 8

CLIENTS = r"""
import asyncio, json, sys
import openai

URL, N = sys.argv[1], int(sys.argv[2])


# A string of 2,000 characters or more: no answer ends before max_tokens.
LONG = {"type": "json_schema", "json_schema": {"name": "long", "schema": {
    "type": "string", "minLength": 2000}}}


async def streams(client, max_tokens, streaming=None):
    first, go = [], asyncio.Event()

    async def one(i):
        stream = await client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": f"count to {i}"}],
            max_tokens=max_tokens, temperature=0, stream=True,
            **({"response_format": LONG} if streaming else {}))
        finishes, counted = [], False
        async for chunk in stream:
            if not chunk.choices:
                continue
            if streaming and chunk.choices[0].delta.content and not counted:
                counted = True
                first.append(i)
                if len(first) == N:  # every stream has text: the parent counts threads
                    await asyncio.to_thread(streaming)
                    go.set()
                await go.wait()
            if chunk.choices[0].finish_reason:
                finishes.append(chunk.choices[0].finish_reason)
        return finishes

    return await asyncio.gather(*(one(i) for i in range(N)))


def say(word):
    print(word, flush=True)
    assert sys.stdin.readline().strip() == "go"


async def main():
    async with openai.AsyncOpenAI(base_url=URL + "/v1", api_key="x", max_retries=0) as client:
        warm = await streams(client, 2)
        say("warm")
        hot = await streams(client, 100, lambda: say("streaming"))
    print(json.dumps([warm, hot]), flush=True)


asyncio.run(main())
"""


def test_concurrent_streams_cost_no_thread_each(make_engine):
    # Paced steps: the answers are still streaming when the threads are counted.
    engine = make_engine([LaneSpec("cpu", "cpu", "float32", LaneConfig(min_step_s=0.02))])
    finished, cond = [], threading.Condition()

    def on_event(event):
        if isinstance(event, Finished):
            with cond:
                finished.append(event)
                cond.notify_all()

    engine.subscribe(on_event)
    served = Served(engine)
    clients = subprocess.Popen([sys.executable, "-c", CLIENTS, served.url, str(N)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        # A first round of N brings the server's pools to their size.
        assert clients.stdout.readline().strip() == "warm"
        with cond:
            assert cond.wait_for(lambda: len(finished) == N, 60)
        before = {t.ident: t.name for t in threading.enumerate()}
        clients.stdin.write("go\n")
        clients.stdin.flush()
        assert clients.stdout.readline().strip() == "streaming"  # all N have text
        during = {t.ident: t.name for t in threading.enumerate()}
        with cond:
            ended_early = len(finished) - N
        clients.stdin.write("go\n")
        clients.stdin.flush()
        out, _ = clients.communicate(timeout=120)
    finally:
        if clients.poll() is None:
            clients.kill()
            clients.wait()
        served.stop()
    warm, hot = json.loads(out)
    assert warm == hot == [["length"]] * N  # each streamed to its end, once
    assert ended_early == 0, "a stream ended before the threads were counted"
    new = sorted(name for ident, name in during.items() if ident not in before)
    # A fixed allowance (an executor's thread started late), never one per stream.
    assert len(during) - len(before) <= 2, new
    assert "api-events" not in during.values()
