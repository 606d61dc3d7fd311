"""Verifying drafts on a lone request's own caches (issue 32, part 3 begun).

One forward pass feeds the token the request writes next and the proposed
tokens after it; the target's own choice at each position says how many of
the proposal it accepts; the KV of the rejected positions is trimmed off the
caches (mlx-lm's `trim_prompt_cache`). Each position draws as a single step
would (keyed by its own position), so drafts never change what a request
writes, greedy or sampled. Rows in the continuous batch (per-row rollback)
are the next part.

`Drafting` is a lane's side of it (LaneConfig(drafts="lookup")): a lone
request's step proposes and verifies when its DraftPolicy says it
pays; its other steps stay plain and pipelined."""

from __future__ import annotations

import time

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

from ..core.drafts import DraftState, LookupDrafter, WidthCost
from ..core.params import SamplingParams
from .sampling import TokenSampler, sample_rows


def why_no_drafts(caches: list) -> str | None:
    """None when rejected positions can be taken back off these caches;
    else why not (a state-space layer's ArraysCache, a sliding window that
    has wrapped): such a request drafts nothing, and its stats say why."""
    if can_trim_prompt_cache(caches):
        return None
    kinds = sorted({type(c).__name__ for c in caches
                    if not (hasattr(c, "is_trimmable") and c.is_trimmable())})
    return f"its caches cannot rewind ({', '.join(kinds) or 'unknown'})"


def verify(model: nn.Module, caches: list, fed: int, proposal: list[int], sampler,
           history: list[int] | None = None) -> list[int]:
    """Feed `fed` and `proposal` in one forward on a lone request's caches
    (which hold everything before `fed`; `history`: the tokens before it).
    Each position draws its token as a single step would, with the request's
    settings and the key of its own position (sampling.py), the tokens before
    it (proposed ones included) as its penalty context. The proposal is
    accepted while the draws agree with it; the first draw that differs (or
    the one after the last proposed token) is the request's own next token.
    So a request writes exactly what it would without drafts, greedy or
    sampled. Returns the accepted run and that token; the caches end holding
    `fed` and the accepted run, nothing rejected."""
    logits = model(mx.array([[fed, *proposal]]), cache=caches)[0]
    seen = list(history or []) + [fed]
    contexts = [seen + proposal[:j] for j in range(len(proposal) + 1)]
    draws = []
    for j in range(len(contexts)):  # each position keyed by its own draw number
        draw = TokenSampler(sampler.params)
        draw.seed, draw.position = sampler.seed, sampler.position + j
        draws.append(draw)
    choices = sample_rows(logits, draws, lambda i, n: contexts[i][-n:]).tolist()
    accepted = 0
    while accepted < len(proposal) and choices[accepted] == proposal[accepted]:
        accepted += 1
    rejected = len(proposal) - accepted
    if rejected:
        trim_prompt_cache(caches, rejected)
    sampler.position += accepted + 1
    return proposal[:accepted] + [choices[accepted]]


def verify_greedy(model: nn.Module, caches: list, fed: int, proposal: list[int]) -> list[int]:
    """`verify` for a plain greedy request."""
    return verify(model, caches, fed, proposal, TokenSampler(SamplingParams()))


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
        if sampler.matcher is not None or sampler.wants_logprobs:
            return False  # grammars and logprobs: later parts of issue 32
        state = request.drafts
        if state is None:
            why = why_no_drafts(batch.cache)
            # A request that cannot draft never indexes its prompt.
            state = request.drafts = DraftState(
                None if why else LookupDrafter(request.prompt_ids), reason=why)
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
        emitted = verify(batch.model, batch.cache, fed, proposal, sampler,
                         request.recent_ids(window))
        self.costs.observe(len(proposal), time.perf_counter() - start)
        if proposal:
            state.policy.record(len(proposal), len(emitted) - 1)
        batch.set_next(mx.array(emitted[-1:], mx.uint32))
        return fed, emitted[:-1], len(proposal)
