"""A conversation three times the context through the API (issue 52): with
`context_overflow` (or `tandem serve --context-overflow`) it is answered,
its oldest turns out of the model's view and counted in the
X-Tandem-Context-Dropped header; without, OpenAI's 400
context_length_exceeded and Anthropic's 400; unknown policies and "compact"
(not built yet) are refused by name. Official SDKs, a real server, the
tests' tiny model (its context: 512 tokens)."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.test_server import Served

HEADER = "x-tandem-context-dropped"


def long_chat(turns: int = 16) -> list[dict]:
    """~3x the tiny model's context (a fixture checks): 16 short exchanges."""
    out = [{"role": "system", "content": "Answer briefly."}]
    for i in range(turns):
        out.append({"role": "user", "content": f"Question {i}: " + "river stone " * 8})
        out.append({"role": "assistant", "content": f"Answer {i}: " + "green hill " * 8})
    out.append({"role": "user", "content": "And now?"})
    return out


@pytest.fixture
def engine(make_engine):
    engine = make_engine()
    assert len(engine.prepare(long_chat()).prompt_ids) > 2.5 * engine.context_length
    return engine


@pytest.mark.parametrize("policy", ["rolling_window", "truncate_middle"])
def test_chat_completions_answer_with_a_policy_and_count_what_left(engine, policy):
    served = Served(engine)
    try:
        client = served.client()
        raw = client.chat.completions.with_raw_response.create(
            model="tiny", messages=long_chat(), max_tokens=8,
            extra_body={"context_overflow": policy})
        done = raw.parse()
        assert raw.http_response.status_code == 200 and done.choices[0].message is not None
        dropped = int(raw.headers[HEADER])
        assert 0 < dropped < len(long_chat()) - 1 and dropped % 2 == 0  # whole turns
        assert done.usage.prompt_tokens + 8 <= engine.context_length
        with client.chat.completions.with_streaming_response.create(
                model="tiny", messages=long_chat(), max_tokens=4, stream=True,
                extra_body={"context_overflow": policy}) as streamed:
            assert int(streamed.headers[HEADER]) == dropped
            assert any(line.startswith("data:") for line in streamed.iter_lines())
        short = client.chat.completions.with_raw_response.create(
            model="tiny", messages=long_chat(0), max_tokens=4,
            extra_body={"context_overflow": policy})
        assert HEADER not in short.headers  # nothing left the view
    finally:
        served.stop()


def test_without_a_policy_each_dialect_refuses_as_its_peer_does(engine):
    served = Served(engine)
    try:
        with pytest.raises(openai.BadRequestError) as e:
            served.client().chat.completions.create(model="tiny", messages=long_chat())
        assert e.value.code == "context_length_exceeded"
        with pytest.raises(anthropic.BadRequestError) as e:
            served.claude().messages.create(model="tiny", max_tokens=8,
                                            messages=long_chat()[1:])
        assert "prompt is too long" in str(e.value)
        for bad, said in (("middle_out", "must be one of"), ("compact", "not available")):
            with pytest.raises(openai.BadRequestError) as e:
                served.client().chat.completions.create(
                    model="tiny", messages=long_chat(), extra_body={"context_overflow": bad})
            assert said in e.value.message and e.value.param == "context_overflow"
    finally:
        served.stop()


def test_messages_and_responses_take_the_field_and_the_servers_default(engine):
    served = Served(engine, context_overflow="rolling_window")  # --context-overflow
    try:
        raw = served.claude().messages.with_raw_response.create(
            model="tiny", max_tokens=8, system="Answer briefly.", messages=long_chat()[1:])
        assert raw.http_response.status_code == 200 and int(raw.headers[HEADER]) > 0
        assert raw.parse().content is not None
        raw = served.client().responses.with_raw_response.create(
            model="tiny", max_output_tokens=16, input=long_chat()[1:],
            extra_body={"context_overflow": "truncate_middle"})
        assert raw.http_response.status_code == 200 and int(raw.headers[HEADER]) > 0
        with pytest.raises(openai.BadRequestError):  # a request's "error" beats the default
            served.client().chat.completions.create(
                model="tiny", messages=long_chat(), extra_body={"context_overflow": "error"})
    finally:
        served.stop()


def test_a_growing_chat_keeps_the_views_start_so_its_prefix_is_reused(engine):
    """One more exchange a request: the count of messages out of view stays
    the same from request to request (the same view start: the prefix cache
    serves the kept turns), and moves only now and then."""
    served = Served(engine)
    try:
        client, counts = served.client(), []
        chat = [{"role": "system", "content": "Answer briefly."}]
        for i in range(120):  # short exchanges: half a context holds many
            chat += [{"role": "user", "content": f"river {i}"},
                     {"role": "assistant", "content": f"stone {i}"}]
        assert len(engine.prepare(chat).prompt_ids) > 1.5 * engine.context_length
        for turns in range(100, 108):
            messages = chat[:1 + 2 * turns] + [{"role": "user", "content": "and?"}]
            raw = client.chat.completions.with_raw_response.create(
                model="tiny", messages=messages, max_tokens=4,
                extra_body={"context_overflow": "rolling_window"})
            counts.append(int(raw.headers[HEADER]))
        assert counts == sorted(counts), counts
        assert sum(a == b for a, b in zip(counts, counts[1:])) >= 5, counts  # of 7 steps
    finally:
        served.stop()
