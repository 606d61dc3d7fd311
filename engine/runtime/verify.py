"""Verifying drafts, in a lane's continuous batch or on a lone request's
caches (issue 32).

One forward pass feeds every row its own token and the tokens proposed
after it (rows with fewer, or none, are padded; their padding is rejected
like a miss); each position draws as a single step would (keyed by its own
position, sampling.py), so drafts never change what a request writes,
greedy or sampled; a row accepts its proposal while the draws agree, and
the KV of its rejected positions leaves its caches: a batch decodes on
ragged caches (ragged.py), where that is one number per row; a lone request
trims its own `KVCache`s (mlx-lm's `trim_prompt_cache`).

`Drafting` is a lane's side of it (LaneConfig(drafts="lookup")): at each
step it asks each row's DraftPolicy and the lane's measured costs whether a
verifying step pays (it gives up the pipelining of a plain step: its
tokens are read before the next step is built) and how wide; the other
steps stay plain and pipelined."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

from ..core.drafts import DraftPlanner
from ..core.params import SamplingParams
from .constrain import draft_cut, draft_masks, unpack
from .ragged import RaggedKVCache
from .sampling import TokenSampler, read_logprobs, sample_rows


def why_no_drafts(caches: list) -> str | None:
    """None when rejected positions can be taken back off these caches;
    else why not (a state-space layer's ArraysCache, a sliding window that
    has wrapped, a batch cache that rewinds only as a whole): such a request
    drafts nothing, and its stats say why."""
    if all(isinstance(c, RaggedKVCache) for c in caches) or can_trim_prompt_cache(caches):
        return None
    kinds = sorted({type(c).__name__ for c in caches
                    if not (hasattr(c, "is_trimmable") and c.is_trimmable())
                    or type(c).__name__.startswith("Batch")})
    return f"its caches cannot rewind ({', '.join(kinds) or 'unknown'})"


@dataclass(slots=True)
class Verified:
    """One row's verification: the accepted tokens and the target's own
    next token after them (last); the logprobs of the accepted ones, for a
    row that asked for logprobs."""

    tokens: list[int]
    logprobs: list = field(default_factory=list)

    @property
    def accepted(self) -> list[int]:
        return self.tokens[:-1]


def verify_rows(model: nn.Module, caches: list, fed: list[int], proposals: list[list[int]],
                samplers: list[TokenSampler], histories: list[list[int]],
                on_dead: Callable[[int, str], None] | None = None,
                row_kwargs: dict | None = None) -> list[Verified]:
    """Feed each row its token `fed[b]` and `proposals[b]` in one forward
    (the caches hold everything before `fed`; `histories[b]`: the row's
    tokens before it, as far as its repetition penalty looks back). Each
    position draws as a single step would: the row's settings, the key of
    its own position, the tokens before it (proposed ones included) as its
    penalty context. A row accepts its proposal while the draws agree; the
    first draw that differs (or the one after its last proposed token) is
    its own next token. The caches end holding `fed` and the accepted runs,
    nothing rejected; each sampler's position moves past its row's tokens
    (and holds the next token's logprobs, pending, when it wants them).

    A row with a grammar (its sampler's matcher) reads `fed` here, proposes
    only what its grammar allows, draws each position under the grammar's
    mask there, and ends having read `fed` and its accepted run (the next
    token is read when it is fed); `on_dead(row, why)` is told of a row
    whose grammar cannot go on."""
    matchers = [s.matcher for s in samplers]
    proposals = [draft_cut(m, f, p) if m is not None else p
                 for m, f, p in zip(matchers, fed, proposals)]
    width = 1 + max(len(p) for p in proposals)
    inputs = [[f, *p] + [f] * (width - 1 - len(p)) for f, p in zip(fed, proposals)]
    logits = model(mx.array(inputs), cache=caches, **(row_kwargs or {}))
    vocab = logits.shape[-1]
    masks = _masks(matchers, proposals, vocab, on_dead) if any(matchers) else None
    at, draws, contexts = [], [], []
    for b, (token, proposal, sampler) in enumerate(zip(fed, proposals, samplers)):
        seen = list(histories[b]) + [token]
        for j in range(len(proposal) + 1):
            at.append(b * width + j)
            draws.append(sampler.drawing_at(sampler.position + j))
            contexts.append(seen + proposal[:j])
    flat = logits.reshape(-1, vocab)
    if len(at) < flat.shape[0]:
        flat = flat[mx.array(at)]
    choices = sample_rows(flat, draws, lambda i, n: contexts[i][-n:], masks=masks)
    mx.eval(choices, *[a for d in draws for a in d.arrays])
    choices = choices.tolist()
    results, rejected, first = [], [], 0
    for proposal, sampler in zip(proposals, samplers):
        mine = choices[first:first + len(proposal) + 1]
        accepted = 0
        while accepted < len(proposal) and mine[accepted] == proposal[accepted]:
            accepted += 1
        row_draws = draws[first:first + accepted + 1]
        first += len(proposal) + 1
        verified = Verified(proposal[:accepted] + [mine[accepted]])
        if sampler.wants_logprobs:
            verified.logprobs = [read_logprobs(d.arrays) for d in row_draws[:-1]]
            sampler.hold(row_draws[-1])
        sampler.position += accepted + 1
        if sampler.matcher is not None and len(proposal) > accepted:
            sampler.matcher.rollback(len(proposal) - accepted)
        rejected.append(width - 1 - accepted)
        results.append(verified)
    _rewind(caches, rejected)
    return results


def _masks(matchers: list, proposals: list[list[int]], vocab: int, on_dead) -> mx.array:
    """(positions drawn, V) booleans, in verify_rows' order: each
    constrained row's masks position by position, every token elsewhere."""
    parts = []
    for row, (matcher, proposal) in enumerate(zip(matchers, proposals)):
        if matcher is None:
            parts.append(np.full((len(proposal) + 1, (vocab + 31) // 32), -1, np.int32))
        else:
            parts.append(draft_masks(matcher, proposal, vocab,
                                     lambda why, r=row: on_dead and on_dead(r, why)))
    return unpack(np.concatenate(parts), vocab)


def _rewind(caches: list, counts: list[int]) -> None:
    """Take each row's rejected positions back off the caches."""
    if not any(counts):
        return
    if all(isinstance(c, RaggedKVCache) for c in caches):
        for cache in caches:
            cache.rewind(counts)
    else:  # a lone request's own caches
        trim_prompt_cache(caches, counts[0])


def verify(model: nn.Module, caches: list, fed: int, proposal: list[int], sampler,
           history: list[int] | None = None) -> list[int]:
    """`verify_rows` for a lone request: its accepted run and its next token."""
    return verify_rows(model, caches, [fed], [proposal], [sampler], [history or []])[0].tokens


def verify_greedy(model: nn.Module, caches: list, fed: int, proposal: list[int]) -> list[int]:
    """`verify` for a plain greedy request."""
    return verify(model, caches, fed, proposal, TokenSampler(SamplingParams()))


@dataclass(slots=True)
class DraftStep:
    """What a verifying step wrote: per row the token fed, then its
    accepted drafts (by row) with their logprobs, and how many positions
    were proposed in all."""

    fed: list[int]
    extra: dict[int, list[int]]
    extra_logprobs: dict[int, list]
    verified: int


class Drafting:
    """Drafts for a lane's decode batch (engine/runtime/batch.py asks at
    each step): the decisions are core/drafts.py's DraftPlanner (plain
    Python, the simulator runs the same), the forward and the draws are
    verify_rows'. The lane tells the planner each step's busy time
    (`stepped`: run, commit and events, no idle time)."""

    def __init__(self, stop_ids: set[int], context_length: int, drafter=None):
        self.planner = DraftPlanner(stop_ids, context_length, drafter)

    @property
    def costs(self):
        return self.planner.costs

    def disturbed(self) -> None:
        """This step did other work too (prefill): its time says nothing."""
        self.planner.disturbed()

    def wants(self, batch) -> bool:
        """Whether this step of `batch` verifies drafts (else it is a plain,
        pipelined step): decided on the host, before anything waits for the
        device (DraftPlanner.plan)."""
        return self.planner.plan(batch.requests, why_no_drafts(batch.cache)) > 0

    def step(self, batch) -> DraftStep:
        """Propose and verify for every row that drafts. The rows' own next
        tokens become the batch's next inputs."""
        fed = batch.next_inputs()  # the previous step's tokens: read here, not pipelined
        proposals = self.planner.proposals(batch.requests, fed)
        for sampler in batch.samplers:  # the tokens fed now take their logprobs along
            if sampler.wants_logprobs:
                sampler.feed()
        histories = [r.recent_ids(s.params.repetition_context_size if s.needs_context else 0)
                     for r, s in zip(batch.requests, batch.samplers)]
        results = verify_rows(batch.model, batch.cache, fed, proposals, batch.samplers,
                              histories, batch.fail_row, batch.row_kwargs())
        self.planner.verified(batch.requests, proposals, [len(v.accepted) for v in results])
        step = DraftStep(fed, {}, {}, sum(len(p) for p in proposals))
        for row, verified in enumerate(results):
            if verified.accepted:
                step.extra[row] = verified.accepted
                step.extra_logprobs[row] = verified.logprobs
        batch.set_next(mx.array([v.tokens[-1] for v in results], mx.uint32))
        return step
