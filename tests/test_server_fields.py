"""The OpenAI server's request fields beyond the messages, on the real engine
(tiny model) through the real `openai` client: logprobs, response_format
(JSON and JSON schemas), and the fields that would change the answer done
or refused (the server and its fixture: tests/test_server.py)."""

import openai
import pytest

from tests.test_server import HELLO, served  # noqa: F401 (a fixture)


def test_logprobs_through_the_openai_client(served):  # noqa: F811
    """Chat and completions, streamed and not: one entry per token, the
    model's raw log-probabilities (greedy: the chosen one is the likeliest),
    top_logprobs sorted, and the same values both ways."""
    client = served.client()
    chat = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=12,
                                          temperature=0, logprobs=True, top_logprobs=3)
    content = chat.choices[0].logprobs.content
    assert content and all(len(e.top_logprobs) == 3 for e in content)
    for entry in content:
        assert entry.logprob <= 0 and entry.top_logprobs[0].logprob == entry.logprob
        assert [t.logprob for t in entry.top_logprobs] == sorted(
            (t.logprob for t in entry.top_logprobs), reverse=True)
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token
    assert "".join(bytes(b for e in content for b in e.bytes).decode("utf-8", "replace")) \
        .startswith(chat.choices[0].message.content[:4])
    streamed = [c for c in client.chat.completions.create(
        model="tiny", messages=HELLO, max_tokens=12, temperature=0, logprobs=True,
        top_logprobs=3, stream=True) if c.choices and c.choices[0].logprobs]
    entries = [e for c in streamed for e in c.choices[0].logprobs.content]
    assert [(e.token, round(e.logprob, 4)) for e in entries] == \
        [(e.token, round(e.logprob, 4)) for e in content]
    text = client.completions.create(model="tiny", prompt="the quick brown fox", max_tokens=6,
                                     temperature=0, logprobs=2)
    lp = text.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == \
        len(lp.text_offset) > 0
    assert all(len(top) <= 2 for top in lp.top_logprobs)
    assert lp.text_offset == sorted(lp.text_offset)
    plain = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=4)
    assert plain.choices[0].logprobs is None


def test_fields_that_would_change_the_answer_are_done_or_refused(served):  # noqa: F811
    client = served.client()
    for extra in ({"top_logprobs": 2}, {"tools": [{"type": "function", "function": {
            "name": "f", "parameters": {"type": "object"}}}]},
            {"response_format": {"type": "yaml"}}, {"logit_bias": {"5": 10}},
            {"frobnicate": 1}, {"top_logprobs": 21, "logprobs": True}):
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=2,
                                           extra_body=extra)
        assert next(iter(extra)) in str(e.value)
    for extra in ({"echo": True}, {"suffix": "end"}, {"best_of": 2}, {"logprobs": 6}):
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model="tiny", prompt="hi", max_tokens=2, extra_body=extra)
        assert next(iter(extra)) in str(e.value)
    # Bookkeeping fields and harmless values are accepted.
    ok = client.chat.completions.create(
        model="tiny", messages=HELLO, max_tokens=2, user="u", store=False,
        metadata={"a": "b"}, tool_choice="none", response_format={"type": "text"},
        logit_bias={}, parallel_tool_calls=True)
    assert ok.choices[0].finish_reason in ("stop", "length")


def test_response_format_gives_json_that_matches(served):  # noqa: F811
    """json_object and json_schema (strict), streamed and not; a bad schema
    is a 400 that says what is wrong."""
    import json as json_

    import jsonschema

    client = served.client()
    schema = {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "trip", "schema": schema,
                                                   "strict": True}}
    for seed in range(3):
        done = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=80,
                                              temperature=1.0, seed=seed, response_format=fmt)
        if done.choices[0].finish_reason == "stop":
            jsonschema.validate(json_.loads(done.choices[0].message.content), schema)
    chunks = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=80,
                                            temperature=0, response_format=fmt, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    jsonschema.validate(json_.loads(text), schema)
    anything = client.chat.completions.create(
        model="tiny", messages=HELLO, max_tokens=120, temperature=0,
        response_format={"type": "json_object"})
    if anything.choices[0].finish_reason == "stop":
        assert isinstance(json_.loads(anything.choices[0].message.content), dict)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=4,
                                       response_format={"type": "json_schema", "json_schema": {
                                           "name": "x", "schema": {"$ref": "#/nope"}}})
    assert "grammar" in str(e.value) or "schema" in str(e.value)
    # Issue 30: a 75 KB $ref chain 1,000 deep ended the server's process; a
    # schema no finite JSON matches answered 200 with text that was not JSON.
    from tests.test_grammar_limits import UNSATISFIABLE, chain

    for bad, why in ((chain(1000), "levels deep"),
                     (UNSATISFIABLE["itself, required"], "cannot be satisfied")):
        with pytest.raises(openai.BadRequestError, match=why):
            client.chat.completions.create(
                model="tiny", messages=HELLO, max_tokens=4, response_format={
                    "type": "json_schema", "json_schema": {"name": "x", "schema": bad}})
    assert client.chat.completions.create(model="tiny", messages=HELLO,
                                          max_tokens=2).choices[0].message is not None
