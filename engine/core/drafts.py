"""Drafts: the tokens a request will probably write next, proposed for the
target model to verify in one forward pass (issue 32), and how many to
propose. Plain Python over token ids, no MLX: the lanes, the scheduler and
the simulator use the same code.

- `LookupDrafter` proposes from text the request already has: the longest
  recent n-gram of its tokens that occurred before (in the prompt or in its
  own answer) and what followed it there (prompt-lookup decoding), and, when
  the request carries a predicted output (OpenAI's `prediction`), that text
  where the answer so far agrees with it.
- `DraftPolicy` decides per request and step how many to propose: the k
  that maximises expected tokens per second from the request's measured
  acceptance and the lane's measured cost of a wider step (draft_cost.py);
  a request whose drafts stop paying stops drafting and tries again later.
- `DraftPlanner` is a lane's drafting, step by step.

The verification itself (positions run in the batch, per-row rollback of
rejected KV) is the lane's (engine/runtime/), not this module's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .draft_cost import WidthCost, choose_width, expected_tokens


class LookupDrafter:
    """Prompt-lookup drafting over a request's tokens (prompt, then answer).

    Every n-gram (min_n..max_n tokens) whose following token is known is
    indexed by its most recent occurrence, as tokens arrive: a proposal is
    one dictionary look-up per n, never a scan of the text, however long."""

    def __init__(self, prompt: Sequence[int], prediction: Sequence[int] | None = None,
                 min_n: int = 2, max_n: int = 4):
        if not 1 <= min_n <= max_n:
            raise ValueError("need 1 <= min_n <= max_n")
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list[int] = []
        self.answer_start = len(prompt)
        self._index: dict[tuple[int, ...], int] = {}  # n-gram -> index after its last end
        self.prediction = list(prediction or [])
        self._predicted: dict[tuple[int, ...], int] = {}
        for end in range(len(self.prediction)):
            self._remember(self._predicted, self.prediction, end)
        self.extend(prompt)

    def extend(self, tokens: Sequence[int]) -> None:
        """Tokens the request now has (prompt, or accepted output)."""
        for token in tokens:
            self.tokens.append(int(token))
            # The n-grams ending just before this token now have a follower.
            self._remember(self._index, self.tokens, len(self.tokens) - 1)

    def _remember(self, index: dict, tokens: list[int], follower: int) -> None:
        """Index the n-grams that end at tokens[follower - 1]: `follower` is
        where what followed them starts."""
        for n in range(self.min_n, self.max_n + 1):
            if follower - n < 0:
                break
            index[tuple(tokens[follower - n:follower])] = follower

    def available(self, k: int) -> int:
        """How many tokens (up to k) a proposal after the next fed token
        would hold, asked before that token is known: what the text so far
        proposes for that token and after it, less the one that stands for it."""
        return max(len(self.propose(k + 1)) - 1, 0)

    def propose(self, k: int) -> list[int]:
        """Up to k tokens that probably come next ([] when nothing matches)."""
        if k <= 0:
            return []
        answer = self.tokens[self.answer_start:]
        if self.prediction and answer == self.prediction[:len(answer)]:
            aligned = self.prediction[len(answer):len(answer) + k]
            if aligned:  # the answer so far is the prediction's start: go on with it
                return aligned
        for n in range(min(self.max_n, len(self.tokens)), self.min_n - 1, -1):
            suffix = tuple(self.tokens[-n:])
            if self.prediction:
                at = self._predicted.get(suffix)
                if at is not None and at < len(self.prediction):
                    return self.prediction[at:at + k]
            at = self._index.get(suffix)
            if at is not None:
                return self.tokens[at:at + k]
        return []


@dataclass
class DraftPolicy:
    """How many drafts one request proposes this step.

    `acceptance`: a running estimate of the chance that a proposed token is
    accepted (each proposal's tokens are accepted up to the first miss).
    `next_k(available, cost_of)`: the k in 0..available maximising expected
    tokens per second, where `cost_of(k)` is the lane's measured time of a
    step that verifies k proposed positions for this row (k = 0: a plain
    step). After `patience` steps at which no k pays, the request stops
    drafting for `rest` steps, then tries one small proposal again."""

    max_k: int = 8
    acceptance: float = 0.6  # a prior until the request has its own
    weight: float = 0.3  # of the newest proposal in the running estimate
    patience: int = 3
    rest: int = 32
    floor: float = 0.2  # below this estimate, a request in a batch rests (record)
    retry: float = 0.45  # its estimate when a rest ends
    drafted: int = 0
    accepted: int = 0
    _unpaid: int = field(default=0, repr=False)
    _resting: int = field(default=0, repr=False)
    _probe: bool = field(default=False, repr=False)

    @property
    def resting(self) -> bool:
        """It drafts nothing for a while: its steps are plain ones."""
        return self._resting > 0

    def rest_step(self) -> None:
        """A plain step while resting; after the last, one small try (and
        in a batch, an estimate that lets it compete again)."""
        self._resting -= 1
        if self._resting <= 0:
            self._resting, self._probe = 0, True
            self.acceptance = max(self.acceptance, self.retry)

    def next_k(self, available: int, cost_of: Callable[[int], float]) -> int:
        if self._probe:
            self._probe = False
            return min(1, available)
        best, best_rate = 0, 1.0 / cost_of(0)
        for k in range(1, min(available, self.max_k) + 1):
            rate = expected_tokens(self.acceptance, k) / cost_of(k)
            if rate > best_rate:
                best, best_rate = k, rate
        if best == 0 and available > 0:
            self._unpaid += 1
            if self._unpaid >= self.patience:
                self._unpaid, self._resting = 0, self.rest
        else:
            self._unpaid = 0
        return best

    def record(self, proposed: int, accepted: int) -> None:
        """A proposal of `proposed` tokens was verified: the first `accepted`
        matched what the target chose."""
        if proposed <= 0:
            return
        self.drafted += proposed
        self.accepted += accepted
        # Accepted up to the first miss: a run of `accepted` hits, then one
        # miss unless all were accepted; per-token rate of this proposal.
        trials = accepted + (1 if accepted < proposed else 0)
        observed = accepted / trials if trials else 0.0
        self.acceptance += self.weight * (observed - self.acceptance)
        if self.acceptance < self.floor:  # its proposals miss: plain steps for a while
            self._resting = self.rest


@dataclass
class DraftState:
    """A request's drafting, carried with it between lanes: what proposes,
    how many, and why it drafts nothing (when its caches cannot rewind: then
    there is no drafter)."""

    drafter: LookupDrafter | None
    policy: DraftPolicy = field(default_factory=DraftPolicy)
    reason: str | None = None


PRIOR_WEIGHT = 0.05  # of each verified proposal in a lane's prior


class DraftPlanner:
    """A lane's drafting decisions, step by step (plain Python: the lanes
    and the simulator run this same code; only their clocks and forward
    passes differ).

    `plan` (before a step, on the host, before anything waits for the
    device): each row's text so far, without the token being fed, proposes
    that token and what follows; the step verifies only when those would
    pay at the lane's measured costs (`WidthCost`), and how wide
    (`choose_width`). `proposals` (once the fed tokens are known): each
    row's proposal, cut to the step's width. `verified`: each row's
    accepted count updates its estimate and the lane's prior (where a new
    request's estimate starts: a workload that copies starts drafting at
    once)."""

    def __init__(self, stop_ids: set[int], context_length: int,
                 drafter: Callable[[object], object] | None = None):
        self.stop_ids = set(stop_ids)
        self.context_length = context_length
        # A request's drafter (LookupDrafter over its prompt and prediction;
        # a draft model's, engine/runtime/draft_model.py; the simulator
        # gives its own, of a set acceptance).
        self.drafter = drafter or (lambda r: LookupDrafter(r.model_ids, r.prediction_ids))
        self.costs = WidthCost()
        self.prior = DraftPolicy().acceptance
        self.width = 0  # the planned verifying step's width past each row's token
        self._misses = 0  # steps in a row where rows proposed and no width paid
        self._last: tuple[int, int] | None = None  # the step's rows and width (0: plain)

    def disturbed(self) -> None:
        """This step did other work too (prefill): its time says nothing."""
        self._last = None

    def plan(self, requests: Sequence, why_not: str | None) -> int:
        """The width of this step past each row's own token (0: a plain
        step). `why_not`: why these rows cannot draft (their caches cannot
        rewind), else None."""
        self._last = (len(requests), 0)
        wants = []
        for request in requests:
            state = request.drafts
            if state is None:
                state = request.drafts = self._state(request, why_not)
            if state.reason is not None:
                wants.append((0.0, 0))
                continue
            if state.policy.resting:
                state.policy.rest_step()
                wants.append((0.0, 0))
                continue
            state.drafter.extend(request.all_ids[len(state.drafter.tokens):])
            wants.append((state.policy.acceptance, state.drafter.available(self._room(request))))
        self.width = self._width(wants, len(requests))
        return self.width

    def proposals(self, requests: Sequence, fed: Sequence[int]) -> list[list[int]]:
        """Each row's proposal after its fed token, for the planned step:
        narrower where they are shorter or pay less with the fed tokens
        known; every row fills the positions the step pays for anyway (and
        so measures its acceptance even where its own estimate would not)."""
        proposals = [self._propose(r, t) for r, t in zip(requests, fed)]
        wants = [(r.drafts.policy.acceptance if p else 0.0, len(p))
                 for r, p in zip(requests, proposals)]
        width = min(self.width, choose_width(wants, self.costs.of(len(requests))) or 1)
        proposals = [p[:width] for p in proposals]
        if self._last is not None:  # the forward's width, as it will run
            self._last = (len(requests), 1 + max(map(len, proposals), default=0))
        return proposals

    def verified(self, requests: Sequence, proposals: Sequence[list[int]],
                 accepted: Sequence[int]) -> None:
        for request, proposal, count in zip(requests, proposals, accepted):
            if proposal:
                request.drafts.policy.record(len(proposal), count)
                observed = count / (count + (count < len(proposal)))
                self.prior += PRIOR_WEIGHT * (observed - self.prior)

    def _state(self, request, why: str | None) -> DraftState:
        """A request's drafting as it first reaches a drafting step; one that
        cannot or will not draft never indexes its prompt."""
        limit = request.params.draft_tokens
        if why is None and limit == 0:
            why = "draft_tokens is 0"
        if why is not None:
            return DraftState(None, reason=why)
        state = DraftState(self.drafter(request))
        if limit is not None:
            state.policy.max_k = limit
        state.policy.acceptance = self.prior
        return state

    def stepped(self, seconds: float) -> None:
        """The step planned last took `seconds` of the lane's busy time."""
        if self._last is not None:
            rows, width = self._last
            if width:
                self.costs.observe(rows, width, seconds)
            else:
                self.costs.observe_plain(rows, seconds)
        self._last = None

    def _width(self, wants: list[tuple[float, int]], rows: int) -> int:
        """choose_width. Asking costs only host work, so a batch asks at
        every step; when rows propose but no width pays, every so often
        (after 4, 8, 16 ... such steps) a one-token try instead, so that
        acceptance is measured rather than assumed."""
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
