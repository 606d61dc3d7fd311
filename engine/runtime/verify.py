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

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np
import mlx.nn as nn
from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

from ..core.drafts import DraftPolicy, DraftState, LookupDrafter, WidthCost, choose_width
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


PRIOR_WEIGHT = 0.05  # of each verified proposal in the lane's prior


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
                on_dead: Callable[[int, str], None] | None = None) -> list[Verified]:
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
    logits = model(mx.array(inputs), cache=caches)
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


def _draft_state(request, why: str | None, prior: float) -> DraftState:
    """A request's drafting as it first reaches a drafting step, its
    acceptance estimate starting at `prior`; a request that cannot or will
    not draft never indexes its prompt."""
    limit = request.params.draft_tokens
    if why is None and limit == 0:
        why = "draft_tokens is 0"
    if why is not None:
        return DraftState(None, reason=why)
    state = DraftState(LookupDrafter(request.prompt_ids, request.prediction_ids))
    if limit is not None:
        state.policy.max_k = limit
    state.policy.acceptance = prior
    return state


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
    each step). Its costs are the lane's own, measured step by step: the
    time from one step's start to the next's, as a plain (pipelined) step
    or as a verifying step of its width (steps that also prefilled are not
    counted)."""

    def __init__(self, stop_ids: set[int], context_length: int):
        self.stop_ids = set(stop_ids)
        self.context_length = context_length
        self.costs = WidthCost()
        # Where a new request's acceptance estimate starts: the lane's recent
        # proposals' (a workload that copies starts drafting at once).
        self.prior = DraftPolicy().acceptance
        self.width = 0  # the verifying step's width past each row's token, as planned
        self._misses = 0  # steps in a row where rows proposed and no width paid
        self._last: tuple[float, int, int] | None = None  # started, rows, width (0: plain)

    def disturbed(self) -> None:
        """This step did other work too (prefill): its time says nothing."""
        self._last = None

    def wants(self, batch) -> bool:
        """Whether this step of `batch` verifies drafts (else it is a plain
        step). Decided on the host before anything waits for the device:
        each row's text so far (without the token being fed, still on the
        device) proposes that token and the ones after it, and the step
        verifies only when those would pay at the lane's measured costs."""
        rows = len(batch.requests)
        self._timed(rows, 0)
        why = why_no_drafts(batch.cache)
        wants = []
        for request in batch.requests:
            state = request.drafts
            if state is None:
                state = request.drafts = _draft_state(request, why, self.prior)
            if state.reason is not None:
                wants.append((0.0, 0))
                continue
            if state.policy.resting:
                state.policy.rest_step()
                wants.append((0.0, 0))
                continue
            state.drafter.extend(request.all_ids[len(state.drafter.tokens):])
            guess = state.drafter.propose(self._room(request) + 1)
            # The guess's first token stands for the one being fed: what
            # follows it is what this row would propose if it is right.
            wants.append((state.policy.acceptance, max(len(guess) - 1, 0)))
        self.width = self._width(wants, rows)
        return self.width > 0

    def _timed(self, rows: int, width: int) -> None:
        """A step starts: the last one's time goes to the costs."""
        now = time.perf_counter()
        if self._last is not None:
            started, last_rows, last_width = self._last
            seconds = now - started
            if seconds < 5 * self.costs.verify(last_rows, max(last_width - 1, 0)) + 0.05:
                if last_width:
                    self.costs.observe(last_rows, last_width, seconds)
                else:
                    self.costs.observe_plain(last_rows, seconds)
        self._last = (now, rows, width)

    def step(self, batch) -> DraftStep:
        """Propose and verify for every row that drafts. The rows' own next
        tokens become the batch's next inputs."""
        rows = len(batch.requests)
        fed = batch.next_inputs()  # the previous step's tokens: read here, not pipelined
        proposals = [self._propose(r, t) for r, t in zip(batch.requests, fed)]
        wants = [(r.drafts.policy.acceptance if p else 0.0, len(p))
                 for r, p in zip(batch.requests, proposals)]
        # The planned width, narrower where the proposals with the fed
        # tokens known are shorter or pay less; every row fills the positions
        # the step pays for anyway (and so measures its acceptance even where
        # its own estimate would not pay).
        width = min(self.width, choose_width(wants, self.costs.of(rows)) or 1)
        proposals = [p[:width] for p in proposals]
        for sampler in batch.samplers:  # the tokens fed now take their logprobs along
            if sampler.wants_logprobs:
                sampler.feed()
        histories = [r.recent_ids(s.params.repetition_context_size if s.needs_context else 0)
                     for r, s in zip(batch.requests, batch.samplers)]
        results = verify_rows(batch.model, batch.cache, fed, proposals, batch.samplers,
                              histories, batch.fail_row)
        self._last = (self._last[0], rows, 1 + width) if self._last else None
        step = DraftStep(fed, {}, {}, sum(len(p) for p in proposals))
        for row, (proposal, verified) in enumerate(zip(proposals, results)):
            if proposal:
                accepted = len(verified.accepted)
                batch.requests[row].drafts.policy.record(len(proposal), accepted)
                observed = accepted / (accepted + (accepted < len(proposal)))
                self.prior += PRIOR_WEIGHT * (observed - self.prior)
            if verified.accepted:
                step.extra[row] = verified.accepted
                step.extra_logprobs[row] = verified.logprobs
        batch.set_next(mx.array([v.tokens[-1] for v in results], mx.uint32))
        return step

    def _width(self, wants: list[tuple[float, int]], rows: int) -> int:
        """The step's width past each row's own token (choose_width). Asking
        costs only host work, so the batch asks at every step; when rows
        propose but no width pays, every so often (after 4, 8, 16 ...
        such steps) a one-token try instead, so that acceptance is measured
        rather than assumed."""
        width = choose_width(wants, self.costs.of(rows))
        if width or not any(n for _, n in wants):
            self._misses = 0 if width else self._misses
            return width
        self._misses += 1
        probe = self._misses >= 4 and self._misses & (self._misses - 1) == 0
        return 1 if probe else 0

    def _room(self, request) -> int:
        """The most tokens `request` may propose after the one fed now."""
        return max(min(request.drafts.policy.max_k,
                       request.params.max_tokens - request.num_output - 1,
                       self.context_length - request.num_prompt - request.num_output - 2), 0)

    def _propose(self, request, fed: int) -> list[int]:
        """Up to the request's room of tokens it probably writes after `fed`."""
        state = request.drafts
        if state is None or state.reason is not None or state.policy.resting:
            return []
        known = request.all_ids + [fed]
        state.drafter.extend(known[len(state.drafter.tokens):])
        # A stop token fed now ends the answer at this commit: nothing after it.
        if fed in self.stop_ids:
            return []
        proposal = state.drafter.propose(self._room(request))
        for i, token in enumerate(proposal):  # a stop token ends the answer: never proposed
            if token in self.stop_ids:
                return proposal[:i]
        return proposal
