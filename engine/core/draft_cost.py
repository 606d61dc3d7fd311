"""What a verifying step costs a lane and what it yields (issue 32): the
expected tokens of a proposal, the lane's measured cost of wider steps
(`WidthCost`), and the batch's width (`choose_width`). Plain Python: the
lanes and the simulator run the same code (core/drafts.py's DraftPlanner)."""

from __future__ import annotations

from collections.abc import Callable


def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens one verification step yields with k proposed, each accepted
    with chance `acceptance` until the first miss, plus the target's own
    token after them: 1 + a + a^2 + ... + a^k."""
    if acceptance >= 1.0:
        return float(k + 1)
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)


class WidthCost:
    """A lane's seconds for a step, learned from its own steps (each step's
    busy time: its run, commit and events, no idle time).

    A step that verifies drafts waits for its tokens before the next one is
    built (its accepted counts decide the next step's inputs): its seconds
    are fitted as a + b * positions, positions = rows x width (width = 1 +
    the proposed positions: a weights read, plus compute per position), by
    least squares with exponential forgetting. A plain step is pipelined
    (the next one is built while the device runs): its seconds are a
    running mean per batch size. Comparing the two is what drafting must
    win: the wider step's extra positions and the pipelining it gives up.
    Two pseudo-steps shaped as this machine's (50 ms for one position, 125
    ms for sixteen), scaled to the lane's measured plain step, stay in the
    fit at a fixed small weight, so a few steps of one width never make it
    degenerate."""

    PRIOR = ((1, 0.050), (16, 0.125))
    PRIOR_WEIGHT = 0.5

    def __init__(self, forget: float = 0.9, weight: float = 0.2):
        self.forget, self.weight = forget, weight
        self._sums = [0.0] * 5  # n, sx, sy, sxx, sxy of the measured steps
        self._scale = 1.0  # of the prior's seconds
        self.plain: dict[int, float] = {}  # rows -> seconds of a plain step
        self.observed = 0  # verifying steps measured

    def observe(self, rows: int, width: int, seconds: float) -> None:
        """A verifying step of `rows` rows `width` positions wide took `seconds`."""
        x, f = rows * width, self.forget
        n, sx, sy, sxx, sxy = self._sums
        self._sums = [f * n + 1, f * sx + x, f * sy + seconds, f * sxx + x * x,
                      f * sxy + x * seconds]
        self.observed += 1

    def observe_plain(self, rows: int, seconds: float) -> None:
        last = self.plain.get(rows)
        self.plain[rows] = seconds if last is None else last + self.weight * (seconds - last)
        # The prior's shape at this lane's speed: its plain step as measured.
        (x0, y0), (x1, y1) = self.PRIOR
        self._scale = self.plain[rows] / (y0 + (y1 - y0) / (x1 - x0) * (rows - x0))

    def fit(self) -> tuple[float, float]:
        """(a, b): seconds = a + b * positions for a verifying step."""
        n, sx, sy, sxx, sxy = self._sums
        for x, y in self.PRIOR:
            w, y = self.PRIOR_WEIGHT, y * self._scale
            n, sx, sy, sxx, sxy = n + w, sx + w * x, sy + w * y, sxx + w * x * x, sxy + w * x * y
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


MARGIN = 0.1  # a verifying step must promise this much more than a plain one


def choose_width(wants: list[tuple[float, int]], cost_of: Callable[[int], float]) -> int:
    """How many positions a batch step verifies past each row's own token
    (0: a plain step), given each row's (acceptance, tokens it proposes):
    the k maximising the batch's expected tokens per second. A row with
    fewer proposed tokens than k proposes what it has; a row with none
    writes its one token. Against a plain step a verifying one must promise
    MARGIN more: its estimates are estimates, and a miss costs the batch."""
    best, best_rate = 0, (1 + MARGIN) * len(wants) / cost_of(0)
    for k in range(1, max((n for _, n in wants), default=0) + 1):
        tokens = sum(expected_tokens(a, min(n, k)) for a, n in wants)
        rate = tokens / cost_of(k)
        if rate > best_rate:
            best, best_rate = k, rate
    return best
