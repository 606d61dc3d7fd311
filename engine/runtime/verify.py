"""Verifying drafts on a lone request's own caches (issue 32, part 3 begun).

One forward pass feeds the token the request writes next and the proposed
tokens after it; the target's own choice at each position says how many of
the proposal it accepts; the KV of the rejected positions is trimmed off the
caches (mlx-lm's `trim_prompt_cache`). Greedy for now: a sampled row, the
continuous batch (per-row rollback) and the lanes' commit of several tokens a
step are the next parts.

Not wired into the lanes yet: benchmarks/speculative.py measures it against
plain one-token steps on the same caches, and tests/test_verify.py checks
that the answer is the plain greedy answer."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache


def why_no_drafts(caches: list) -> str | None:
    """None when rejected positions can be taken back off these caches;
    else why not (a state-space layer's ArraysCache, a sliding window that
    has wrapped): such a request drafts nothing, and its stats say why."""
    if can_trim_prompt_cache(caches):
        return None
    kinds = sorted({type(c).__name__ for c in caches
                    if not (hasattr(c, "is_trimmable") and c.is_trimmable())})
    return f"its caches cannot rewind ({', '.join(kinds) or 'unknown'})"


def verify_greedy(model: nn.Module, caches: list, fed: int, proposal: list[int]) -> list[int]:
    """Feed `fed` and `proposal` in one forward on a lone request's caches
    (which hold everything before `fed`). Returns the tokens the request
    writes: the accepted run of the proposal, then the target's own next
    token (its next `fed`). The caches end holding `fed` and the accepted
    run, nothing rejected."""
    logits = model(mx.array([[fed, *proposal]]), cache=caches)[0]
    choices = mx.argmax(logits, axis=-1).tolist()
    accepted = 0
    while accepted < len(proposal) and choices[accepted] == proposal[accepted]:
        accepted += 1
    rejected = len(proposal) - accepted
    if rejected:
        trim_prompt_cache(caches, rejected)
    return proposal[:accepted] + [choices[accepted]]
