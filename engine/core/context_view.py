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


def text_chars(messages: list[dict]) -> int:
    """The characters of the messages' text (what `cell_chars` counts)."""
    return sum(_chars(m) for m in messages)


def _chars(message: dict) -> int:
    content = message.get("content")
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):  # parts: their text
        return sum(len(p.get("text") or "") for p in content if isinstance(p, dict))
    return 0


def fit(messages: list[dict], policy: str, fits: Callable[[list[dict]], bool],
        cell_chars: int = 0) -> tuple[list[dict], int]:
    """(the messages the model sees, how many left its view): the fewest
    oldest droppable turns removed for `fits` to hold. Where even the
    fewest messages the policy keeps do not fit, those are returned (the
    engine then refuses them, saying by how much).

    `cell_chars` > 0 keeps the view's start still while a chat grows, so
    its prefix (and the KV cached for it) stays the same from request to
    request: the conversation's characters are cut in cells of that size
    (their offsets never move as turns are appended), and the view starts
    at the last turn that starts in the cell where the fewest-turns cut
    starts. The next request cuts there again until that cut no longer
    fits; then the view jumps a cell. (The server uses half the context.)"""
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
    if cell_chars > 0:
        low = _settled(messages, droppable, low, cell_chars)
    return without(low)


def _settled(messages: list[dict], droppable: list[tuple[int, int]], k: int,
             cell_chars: int) -> int:
    """The most turns to drop whose view starts in the same cell as
    dropping `k` (more dropped: it fits too), never the latest turn."""
    offsets, at = [], 0  # each message's character offset in the whole conversation
    for message in messages:
        offsets.append(at)
        at += _chars(message)

    def cell(j: int) -> int:  # the cell where the view starts once j turns are gone
        start = droppable[j][0] if j < len(droppable) else droppable[-1][1]
        return offsets[start] // cell_chars

    best = k
    while best + 1 <= len(droppable) and cell(best + 1) == cell(k):
        best += 1
    return best


# the engine's public names (engine/__init__.py)
CONTEXT_POLICIES, fit_context, context_text_chars = POLICIES, fit, text_chars
