"""A conversation past the model's context, through the API (issue 52): the
request's `context_overflow` (chat completions, responses, messages) or
`tandem serve --context-overflow` picks which whole turns leave the model's
view (engine/core/context_view.py); "error" (the default) refuses, as
OpenAI's 400 `context_length_exceeded` and Anthropic's 400 "prompt is too
long". Fitted, the prompt leaves room for the answer (max_tokens, at most a
quarter of the context), and the view's start stays put while the chat grows
by about half a context (its prefix, and the KV cached for it, reused). The response says how many messages left the view
in the `X-Tandem-Context-Dropped` header (absent when none did; streaming
or not, every dialect alike).
"""

from __future__ import annotations

from dataclasses import replace

import math

from engine import CONTEXT_POLICIES as POLICIES, context_text_chars, fit_context as fit

from .errors import APIError

FIELD = "context_overflow"
HEADER = b"x-tandem-context-dropped"
DEFAULT_ROOM = 512  # tokens left for the answer where max_tokens is not set
NOT_YET = {"compact": "summarizing older turns is not available on this server yet"}


def policy_of(body: dict) -> str | None:
    """The body's `context_overflow`, checked: None where absent."""
    value = body.get(FIELD)
    if value is None:
        return None
    if value in NOT_YET:
        raise APIError(400, f"{FIELD} {value!r}: {NOT_YET[value]}.", param=FIELD)
    if not isinstance(value, str) or value not in POLICIES:
        raise APIError(400, f"{FIELD} must be one of {', '.join(POLICIES)}, not "
                            f"{str(value)[:40]!r}.", param=FIELD)
    return value


def fitted(engine, job, default: str, prepare, refold):
    """(prepared, messages that left the view): `prepare(job)` of the job
    itself, or of its messages fitted by its policy (else `default`);
    `refold(messages)`: the fold of a view, for a job that carries one
    (messages_blocks.folded)."""
    prepared = prepare(job)
    policy = job.context_overflow or default
    context = getattr(engine, "context_length", None)
    if policy == "error" or not context or job.messages is None:
        return prepared, 0
    limit = context - min(job.params.max_tokens or DEFAULT_ROOM, context // 4)
    if len(prepared.prompt_ids) <= limit:
        return prepared, 0

    def with_messages(messages):
        return replace(job, messages=messages,
                       folded=refold(messages) if job.folded is not None else None)

    # Cells of about half the context keep the view's start still as the chat
    # grows: the same prefix, the prefix cache's KV reused. Characters a token
    # from this conversation, rounded down to a power of two (a rate that
    # moved a little each request would move every cell's edge with it).
    rate = context_text_chars(job.messages) / max(1, len(prepared.prompt_ids))
    per_token = 2 ** math.floor(math.log2(max(rate, 1.0)))
    view, dropped = fit(job.messages, policy,
                        lambda messages: len(prepare(with_messages(messages)).prompt_ids) <= limit,
                        cell_chars=context // 2 * per_token)
    return (prepare(with_messages(view)), dropped) if dropped else (prepared, 0)


class DroppedHeader:
    """ASGI: the header above, from the request's state (set by the route
    before its response starts)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_header(message):
            dropped = scope.get("state", {}).get("context_dropped")
            if message["type"] == "http.response.start" and dropped:
                message = {**message, "headers": [*message.get("headers", []),
                                                  (HEADER, str(dropped).encode())]}
            await send(message)

        await self.app(scope, receive, with_header)
