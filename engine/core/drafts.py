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


def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens one verification step yields with k proposed, each accepted
    with chance `acceptance` until the first miss, plus the target's own
    token after them: 1 + a + a^2 + ... + a^k."""
    if acceptance >= 1.0:
        return float(k + 1)
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)


class WidthCost:
    """A lane's seconds for a step, learned from its own steps.

    A step that verifies drafts waits for its tokens before the next one is
    built (its accepted counts decide the next step's inputs): its seconds
    are fitted as a + b * positions, positions = rows x width (width = 1 +
    the proposed positions; a weights read plus compute per position, with
    exponential forgetting). A plain step is pipelined (the next one is
    built while the device runs): its seconds are a running mean per batch
    size. Comparing the two is what drafting must win: the wider step's
    extra positions and the pipelining it gives up. Before any measurement
    the fit is two pseudo-steps of this machine (50 ms for one position,
    125 ms for sixteen)."""

    PRIOR = ((1, 0.050), (16, 0.125))

    def __init__(self, forget: float = 0.9, weight: float = 0.2):
        self.forget, self.weight = forget, weight
        self._prior(1.0)
        self.plain: dict[int, float] = {}  # rows -> seconds of a plain step
        self.observed = 0  # verifying steps measured

    def _prior(self, scale: float) -> None:
        self._sums = [0.0] * 5  # n, sx, sy, sxx, sxy
        for x, y in self.PRIOR:
            self._add(x, y * scale)

    def _add(self, x: float, y: float) -> None:
        f = self.forget
        n, sx, sy, sxx, sxy = self._sums
        self._sums = [f * n + 1, f * sx + x, f * sy + y, f * sxx + x * x, f * sxy + x * y]

    def observe(self, rows: int, width: int, seconds: float) -> None:
        """A verifying step of `rows` rows `width` positions wide took `seconds`."""
        self._add(rows * width, seconds)
        self.observed += 1

    def observe_plain(self, rows: int, seconds: float) -> None:
        last = self.plain.get(rows)
        self.plain[rows] = seconds if last is None else last + self.weight * (seconds - last)
        if not self.observed:  # the prior's shape, at this lane's measured speed
            self._prior(1.0)
            a, b = self.fit()
            self._prior(self.plain[rows] / (a + b * rows))

    def fit(self) -> tuple[float, float]:
        """(a, b): seconds = a + b * positions for a verifying step."""
        n, sx, sy, sxx, sxy = self._sums
        spread = n * sxx - sx * sx
        b = (n * sxy - sx * sy) / spread if spread > 1e-12 else 0.0
        b = max(b, 0.0)
        return max((sy - b * sx) / n, 0.0), b

    def verify(self, rows: int, k: int) -> float:
        a, b = self.fit()
        return a + b * rows * (k + 1)

    def of(self, rows: int) -> Callable[[int], float]:
        """cost_of(k) for DraftPolicy.next_k in a batch of `rows`: k = 0 is a
        plain step (measured, else a verifying step of width 1)."""
        def cost_of(k: int) -> float:
            if k == 0:
                plain = self.plain.get(rows)
                return plain if plain is not None else self.verify(rows, 0)
            return self.verify(rows, k)
        return cost_of

    def __call__(self, k: int) -> float:
        """A lone request's cost_of(k)."""
        return self.of(1)(k)


def choose_width(wants: list[tuple[float, int]], cost_of: Callable[[int], float]) -> int:
    """How many positions a batch step verifies past each row's own token
    (0: a plain step), given each row's (acceptance, tokens it proposes):
    the k maximising the batch's expected tokens per second. A row with
    fewer proposed tokens than k proposes what it has; a row with none
    writes its one token."""
    best, best_rate = 0, len(wants) / cost_of(0)
    for k in range(1, max((n for _, n in wants), default=0) + 1):
        tokens = sum(expected_tokens(a, min(n, k)) for a, n in wants)
        rate = tokens / cost_of(k)
        if rate > best_rate:
            best, best_rate = k, rate
    return best


@dataclass
class DraftState:
    """A request's drafting, carried with it between lanes: what proposes,
    how many, and why it drafts nothing (when its caches cannot rewind: then
    there is no drafter)."""

    drafter: LookupDrafter | None
    policy: DraftPolicy = field(default_factory=DraftPolicy)
    reason: str | None = None
