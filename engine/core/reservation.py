"""How many KV positions a request reserves on its lane (`Request.kv_tokens`).

A request with a `max_tokens` reserves its prompt + max_tokens (capped at the
context) when it is placed: admission (engine/core/scheduler.py) counts that,
so it can never outgrow its lane's KV budget.

A request without one (`max_tokens=None`: a client that set no limit, as
Codex does) may write until the context is full. Reserving the whole context
for it would let one such request fill a lane (a 128k-token context is more
KV than many machines hold), so it reserves its prompt + `OPEN_STEP` tokens
and grows by `OPEN_STEP` as it writes, while the lane has room beside what
its other requests reserve; when the lane has none, the answer ends there,
`length`, as it does at the context's end.
"""

from __future__ import annotations

import dataclasses

from .params import DRAFT_LIMIT
from .request import Request

OPEN_STEP = 512  # what an answer without a limit reserves at a time (the old default limit)
GROW_AHEAD = DRAFT_LIMIT + 1  # the most tokens one step writes for a request


def settle_limit(request: Request, context_length: int) -> None:
    """Give a request without max_tokens the rest of the context as its limit
    (marked `open_ended`); every later reader of `params.max_tokens` sees a number."""
    if request.params.max_tokens is None:
        left = max(context_length - request.num_prompt, 1)
        request.params = dataclasses.replace(request.params, max_tokens=left)
        request.open_ended = True


def first_reservation(request: Request, context_length: int) -> int:
    """KV positions a request reserves when it is placed."""
    if request.open_ended:
        return min(request.num_prompt + OPEN_STEP, context_length)
    return min(request.num_prompt + request.params.max_tokens, context_length)


def needs_more(request: Request, context_length: int) -> bool:
    """Whether an open-ended request's next step could pass its reservation."""
    return (request.open_ended and request.kv_tokens < context_length
            and request.num_prompt + request.num_output + GROW_AHEAD > request.kv_tokens)


def grown(request: Request, context_length: int) -> int:
    """Its reservation one step larger."""
    return min(request.kv_tokens + OPEN_STEP, context_length)
