"""A remote lane's cost model, learned online from its answers. Plain Python.

ttft_s(uncached)        = overhead_s + uncached / prefill_tps
stream_tps(n)           = decode_tps / (1 + batch_alpha * (n - 1))

`overhead_s` is the round trip and the server's admission (the time to first
token of a fully cached prompt); `n` is how many of our requests it serves
at once. Both lines are fitted by least squares over the last answers (a
window, so a server that gets busier is followed): time to first token
against uncached prompt tokens, and seconds per output token against
concurrency. With too little spread in a window, only the level moves
(overhead, one-stream speed) and the slope keeps its last fit.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

WINDOW = 32
MIN_SPREAD_TOKENS = 64  # uncached tokens between answers before the prefill rate is fitted


def _fit(points) -> tuple[float, float] | None:
    """Least squares y = a + b x; None without spread in x."""
    n = len(points)
    if n < 2:
        return None
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx <= 0:
        return None
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - b * mx, b


@dataclass(slots=True)
class RemoteCost:
    overhead_s: float = 0.2
    prefill_tps: float = 2_000.0
    decode_tps: float = 30.0  # one stream alone
    batch_alpha: float = 0.05
    smoothing: float = 0.3
    samples: int = 0
    alpha_fitted: bool = False  # the batch factor comes from enough answers at several n
    mean_request_s: float = 5.0  # a whole answer, for queueing behind a full remote
    abs_errors: list[float] = field(default_factory=list)
    _ttft: deque = field(default_factory=lambda: deque(maxlen=WINDOW))
    _tpot: deque = field(default_factory=lambda: deque(maxlen=WINDOW))

    def ttft_s(self, uncached: int) -> float:
        return self.overhead_s + max(uncached, 0) / self.prefill_tps

    def stream_tps(self, concurrency: int) -> float:
        return self.decode_tps / (1.0 + self.batch_alpha * max(concurrency - 1, 0))

    def request_s(self, uncached: int, output: float, concurrency: int) -> float:
        """A whole answer once the remote starts it."""
        return self.ttft_s(uncached) + max(output - 1, 0) / self.stream_tps(concurrency)

    def useful_concurrency(self, limit: int) -> int:
        """The most concurrent requests where one more still adds at least a
        quarter of a lone stream's speed to its output rate
        (n / (1 + alpha (n-1)) flattens as alpha grows)."""
        def rate(n: int) -> float:
            return n / (1.0 + self.batch_alpha * (n - 1))

        n = 1
        while n < limit and rate(n + 1) - rate(n) >= 0.25:
            n += 1
        return n

    def observe(self, uncached: int, ttft_s: float, output_tokens: int, decode_s: float,
                concurrency: float, predicted_s: float | None = None,
                total_s: float | None = None) -> None:
        """Refine from one answer: its time to first token, and (with two or
        more tokens) its seconds per later token at the concurrency it saw."""
        if predicted_s and total_s:
            self.abs_errors.append(abs(total_s / predicted_s - 1.0))
            if len(self.abs_errors) > 1000:
                del self.abs_errors[:500]
        a = self.smoothing
        if total_s is not None and total_s > 0:
            self.mean_request_s += a * (total_s - self.mean_request_s)
        if ttft_s > 0:
            self._ttft.append((max(uncached, 0), ttft_s))
            spread = max(x for x, _ in self._ttft) - min(x for x, _ in self._ttft)
            fit = _fit(self._ttft) if spread >= MIN_SPREAD_TOKENS else None
            if fit is not None and fit[0] > 0 and fit[1] > 0:
                self.overhead_s, self.prefill_tps = fit[0], 1.0 / fit[1]
            else:  # the level only: what this answer's first token says of the overhead
                seen = ttft_s - max(uncached, 0) / self.prefill_tps
                self.overhead_s = max(0.001, self.overhead_s + a * (seen - self.overhead_s))
        if output_tokens >= 2 and decode_s > 0:
            per_token = decode_s / (output_tokens - 1)
            n = max(concurrency, 1.0)
            self._tpot.append((n - 1.0, per_token))
            fit = _fit(self._tpot)
            if fit is not None and fit[0] > 0:
                self.decode_tps = 1.0 / fit[0]
                self.batch_alpha = min(max(fit[1] / fit[0], 0.0), 4.0)
                self.alpha_fitted = len(self._tpot) >= 8
            else:
                one = per_token / (1.0 + self.batch_alpha * (n - 1.0))
                self.decode_tps = 1.0 / ((1 - a) / self.decode_tps + a * one)
        self.samples += 1

    @property
    def mean_abs_error(self) -> float | None:
        return sum(self.abs_errors) / len(self.abs_errors) if self.abs_errors else None

    def copy(self) -> "RemoteCost":
        return RemoteCost(self.overhead_s, self.prefill_tps, self.decode_tps, self.batch_alpha,
                          self.smoothing, mean_request_s=self.mean_request_s)

    def describe(self) -> str:
        return (f"first token {self.overhead_s * 1000:.0f} ms + prompt at "
                f"{self.prefill_tps:,.0f} tok/s; {self.decode_tps:.1f} tok/s per stream alone, "
                f"{self.stream_tps(4):.1f} at 4 at once")
