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
  acceptance and the lane's measured cost of a wider step; a request whose
  drafts stop paying stops drafting and tries again later.

The verification itself (positions run in the batch, per-row rollback of
rejected KV) is the lane's (engine/runtime/), not this module's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


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
        """A plain step while resting; after the last, one small try."""
        self._resting -= 1
        if self._resting <= 0:
            self._resting, self._probe = 0, True

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


def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens one verification step yields with k proposed, each accepted
    with chance `acceptance` until the first miss, plus the target's own
    token after them: 1 + a + a^2 + ... + a^k."""
    if acceptance >= 1.0:
        return float(k + 1)
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)


class WidthCost:
    """A lane's seconds for a lone request's step that verifies k proposed
    positions, learned from its own steps: base + slope * k (a wide step of
    a small batch reads the weights once: k costs little until compute
    binds). Before any measurement: 50 ms and a ninth of it per position
    (this machine: 43 ms for one position, 82 ms for nine)."""

    def __init__(self, weight: float = 0.2):
        self.base: float | None = None
        self.slope: float | None = None
        self.weight = weight

    def observe(self, k: int, seconds: float) -> None:
        if k == 0:
            self.base = seconds if self.base is None else \
                self.base + self.weight * (seconds - self.base)
        elif self.base is not None:
            sample = max(seconds - self.base, 0.0) / k
            self.slope = sample if self.slope is None else \
                self.slope + self.weight * (sample - self.slope)

    def __call__(self, k: int) -> float:
        base = self.base if self.base is not None else 0.05
        slope = self.slope if self.slope is not None else base / 9
        return base + slope * k


@dataclass
class DraftState:
    """A request's drafting, carried with it between lanes: what proposes,
    how many, and why it drafts nothing (when its caches cannot rewind: then
    there is no drafter)."""

    drafter: LookupDrafter | None
    policy: DraftPolicy = field(default_factory=DraftPolicy)
    reason: str | None = None
