"""Which messages of a conversation the model sees when the whole of it is
longer than the context (issue 52): whole turns leave the view, oldest
first; the system messages that lead the conversation and the latest turn
never do. Plain Python over chat messages; the caller says what fits (a
rendered, tokenized length: only the chat template knows it).

A turn starts at a user message and holds what follows it up to the next
one (the answer, its tool calls and their results: a call never loses its
result). Policies:
- "error": nothing leaves the view; a conversation too long is refused, as
  before;
- "truncate_middle": the first turn stays beside the system messages, the
  turns after it leave first (LM Studio's "truncate middle");
- "rolling_window": the oldest turns leave first (a window of the latest).
Nothing is deleted: the caller keeps every message, the view is computed
again for each request.
"""

from __future__ import annotations

from typing import Callable

POLICIES = ("error", "truncate_middle", "rolling_window")
LEADING_ROLES = ("system", "developer")


def turns(messages: list[dict]) -> tuple[int, list[tuple[int, int]]]:
    """(how many system messages lead, each turn's [start, end) after them)."""
    lead = 0
    while lead < len(messages) and messages[lead].get("role") in LEADING_ROLES:
        lead += 1
    starts = [i for i in range(lead, len(messages)) if messages[i].get("role") == "user"]
    if lead < len(messages) and (not starts or starts[0] != lead):
        starts.insert(0, lead)  # a conversation that opens with an answer: its own turn
    return lead, list(zip(starts, starts[1:] + [len(messages)]))


def fit(messages: list[dict], policy: str,
        fits: Callable[[list[dict]], bool]) -> tuple[list[dict], int]:
    """(the messages the model sees, how many left its view): the fewest
    oldest droppable turns removed for `fits` to hold. Where even the
    fewest messages the policy keeps do not fit, those are returned (the
    engine then refuses them, saying by how much)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown context policy {policy!r}")
    if policy == "error" or fits(messages):
        return messages, 0
    _, spans = turns(messages)
    first = 1 if policy == "truncate_middle" else 0
    droppable = spans[first:-1]  # never the latest turn
    if not droppable:
        return messages, 0

    def without(k: int) -> tuple[list[dict], int]:
        gone = {i for start, end in droppable[:k] for i in range(start, end)}
        return [m for i, m in enumerate(messages) if i not in gone], len(gone)

    low, high = 1, len(droppable)  # the shortest view that fits: fewest turns gone
    if not fits(without(high)[0]):
        return without(high)
    while low < high:
        middle = (low + high) // 2
        if fits(without(middle)[0]):
            high = middle
        else:
            low = middle + 1
    return without(low)


CONTEXT_POLICIES, fit_context = POLICIES, fit  # the engine's public names (engine/__init__.py)
