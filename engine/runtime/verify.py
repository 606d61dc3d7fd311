"""Verifying drafts on a lone request's own caches (issue 32, part 3 begun).

One forward pass feeds the token the request writes next and the proposed
tokens after it; the target's own choice at each position says how many of
the proposal it accepts; the KV of the rejected positions is trimmed off the
caches (mlx-lm's `trim_prompt_cache`). Greedy (with or without a repetition
penalty) for now: a sampled row and rows in the continuous batch (per-row
rollback) are the next parts.

`Drafting` is a lane's side of it (LaneConfig(drafts="lookup")): a lone
greedy request's step proposes and verifies when its DraftPolicy says it
pays; its other steps stay plain and pipelined."""

from __future__ import annotations

import time

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

from ..core.drafts import DraftState, LookupDrafter, WidthCost
from .sampling import penalise


def why_no_drafts(caches: list) -> str | None:
    """None when rejected positions can be taken back off these caches;
    else why not (a state-space layer's ArraysCache, a sliding window that
    has wrapped): such a request drafts nothing, and its stats say why."""
    if can_trim_prompt_cache(caches):
        return None
    kinds = sorted({type(c).__name__ for c in caches
                    if not (hasattr(c, "is_trimmable") and c.is_trimmable())})
    return f"its caches cannot rewind ({', '.join(kinds) or 'unknown'})"


def verify_greedy(model: nn.Module, caches: list, fed: int, proposal: list[int],
                  sampler=None, history: list[int] | None = None) -> list[int]:
    """Feed `fed` and `proposal` in one forward on a lone request's caches
    (which hold everything before `fed`). Returns the tokens the request
    writes: the accepted run of the proposal, then the target's own next
    token (its next `fed`). The caches end holding `fed` and the accepted
    run, nothing rejected. `sampler` with a repetition penalty (and
    `history`, the tokens before `fed`): each position is penalised by the
    tokens before it, the proposed ones included, as single steps would."""
    logits = model(mx.array([[fed, *proposal]]), cache=caches)[0]
    if sampler is not None and sampler.needs_context:
        seen = list(history or []) + [fed]
        rows = [seen + proposal[:j] for j in range(len(proposal) + 1)]
        logits = penalise(logits.astype(mx.float32), list(range(len(rows))),
                           [sampler] * len(rows), lambda i, n: rows[i][-n:], None)
    choices = mx.argmax(logits, axis=-1).tolist()
    accepted = 0
    while accepted < len(proposal) and choices[accepted] == proposal[accepted]:
        accepted += 1
    rejected = len(proposal) - accepted
    if rejected:
        trim_prompt_cache(caches, rejected)
    return proposal[:accepted] + [choices[accepted]]


class Drafting:
    """Drafts for a lane's lone request (engine/runtime/batch.py asks)."""

    def __init__(self, stop_ids: set[int], context_length: int):
        self.stop_ids = set(stop_ids)
        self.context_length = context_length
        self.costs = WidthCost()

    def wants(self, batch) -> bool:
        """Whether this step of `batch` proposes (else it is a plain step)."""
        if not batch.solo or len(batch.requests) != 1:
            return False
        request, sampler = batch.requests[0], batch.samplers[0]
        if not sampler.params.is_greedy or sampler.matcher is not None or \
                sampler.wants_logprobs:
            return False  # sampled rows, grammars and logprobs: later parts of issue 32
        state = request.drafts
        if state is None:
            why = why_no_drafts(batch.cache)
            state = request.drafts = DraftState(LookupDrafter([] if why else
                                                              request.prompt_ids), reason=why)
            state.drafter.answer_start = request.num_prompt
        if state.reason is not None:
            return False
        if state.policy.resting:
            state.policy.rest_step()
            return False
        return True

    def step(self, batch) -> tuple[int, list[int], int]:
        """Propose and verify: (the token fed, the accepted tokens after it,
        positions verified). The target's own next token is the batch's
        next input."""
        request, state = batch.requests[0], batch.requests[0].drafts
        sampler = batch.samplers[0]
        fed = int(batch.pending_token(0).item())  # the previous step's token: it ends here
        known = request.all_ids + [fed]
        state.drafter.extend(known[len(state.drafter.tokens):])
        room = min(state.policy.max_k, request.params.max_tokens - request.num_output - 1,
                   self.context_length - request.num_prompt - request.num_output - 2)
        # A stop token fed now ends the answer at this commit: nothing after it.
        proposal = state.drafter.propose(room) if fed not in self.stop_ids else []
        for i, token in enumerate(proposal):  # a stop token ends the answer: never proposed
            if token in self.stop_ids:
                proposal = proposal[:i]
                break
        proposal = proposal[:state.policy.next_k(len(proposal), self.costs)]
        start = time.perf_counter()
        window = sampler.params.repetition_context_size if sampler.needs_context else 0
        emitted = verify_greedy(batch.model, batch.cache, fed, proposal, sampler,
                                request.recent_ids(window))
        self.costs.observe(len(proposal), time.perf_counter() - start)
        if proposal:
            state.policy.record(len(proposal), len(emitted) - 1)
        batch.set_next(mx.array(emitted[-1:], mx.uint32))
        return fed, emitted[:-1], len(proposal)
