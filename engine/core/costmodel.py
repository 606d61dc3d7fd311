"""Per-lane cost model: predicted prefill and decode-step times. Plain Python.

prefill_s(n)            = n / prefill_tps
decode_step_s(B, ctx)   = (1 / decode_tps(ctx)) * (1 + batch_alpha * (B - 1))

decode_tps(ctx) interpolates linearly between measured (context, tokens/s)
points. batch_alpha is 1 when batching does not raise throughput (a step of B
requests takes B times as long) and near 0 when a batch costs the same as one
request. `contention` is the extra fraction a step takes while the other lanes
also run (shared memory bandwidth).

The model is calibrated at load and refined online: each measured step nudges
a correction factor (an exponential moving average of measured / predicted).
Steps run while no other lane ran refine the prefill and decode corrections;
steps run while another lane also ran refine `contention` instead, so a lane
learns how much the others slow it (shared memory bandwidth on a Mac, shared
cores when two CPU lanes share a small machine) and the router learns when a
second lane does not pay.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field


PACED_BATCH = 8  # where a paced lane's batch factor is fitted (CostModel.paced)
SETTLED_CONTENDED_STEPS = 20  # contended steps after which `contention` is known


@dataclass(slots=True)
class CostModel:
    prefill_tps: float
    decode_points: list[tuple[int, float]]  # (context tokens, one-stream tokens/s)
    batch_alpha: float = 1.0
    contention: float = 0.0
    prefill_correction: float = 1.0
    decode_correction: float = 1.0
    smoothing: float = 0.2
    samples: int = 0
    contended_samples: int = 0
    learn_contention: bool = True  # False: contended steps refine the base (ablation)
    max_contention: float = 3.0
    contention_stored: bool = False  # `contention` came from the last run (coststore.py)
    # The same while another lane prefills (it computes flat out, so it can
    # slow this lane more than its decodes do); learned apart.
    prefill_contention: float = 0.0
    prefill_contended_samples: int = 0
    prefill_contention_stored: bool = False
    abs_errors: list[float] = field(default_factory=list)  # relative errors seen online

    def __post_init__(self):
        if self.prefill_tps <= 0 or not self.decode_points:
            raise ValueError("a cost model needs a positive prefill rate and decode points")
        self.decode_points = sorted(self.decode_points)

    def decode_tps(self, context: float) -> float:
        points = self.decode_points
        if context <= points[0][0] or len(points) == 1:
            return points[0][1]
        if context >= points[-1][0]:
            # Extrapolate the last segment's slope, but never below a tenth.
            (c0, t0), (c1, t1) = points[-2], points[-1]
            slope = (t1 - t0) / (c1 - c0)
            return max(t1 + slope * (context - c1), points[-1][1] * 0.1)
        i = bisect_left([c for c, _ in points], context)
        (c0, t0), (c1, t1) = points[i - 1], points[i]
        return t0 + (t1 - t0) * (context - c0) / (c1 - c0)

    def prefill_s(self, tokens: int) -> float:
        return self.prefill_correction * max(tokens, 0) / self.prefill_tps

    def decode_step_s(self, batch: int, context: float) -> float:
        if batch <= 0:
            return 0.0
        one = 1.0 / self.decode_tps(context)
        return self.decode_correction * one * (1.0 + self.batch_alpha * (batch - 1))

    def step_s(self, batch: int, context: float, prefill_tokens: int,
               contended: bool = False) -> float:
        """A whole step: one decode token per running request plus a prefill chunk."""
        t = self.decode_step_s(batch, context) + self.prefill_s(prefill_tokens)
        return t * (1.0 + self.contention) if contended else t

    def observe(self, batch: int, context: float, prefill_tokens: int, seconds: float,
                contended: bool = False, beside_prefill: bool = False) -> None:
        """Refine the model from one measured step."""
        predicted = self.step_s(batch, context, prefill_tokens, contended)
        if predicted <= 0 or seconds <= 0:
            return
        ratio = seconds / predicted
        self.abs_errors.append(abs(ratio - 1.0))
        ratio = min(max(ratio, 0.2), 5.0)  # one odd step must not swing the model
        if len(self.abs_errors) > 1000:
            del self.abs_errors[:500]
        self.samples += 1
        a = self.smoothing
        decode_part = self.decode_step_s(batch, context)
        prefill_part = self.prefill_s(prefill_tokens)
        quiet_ratio = seconds / (decode_part + prefill_part)
        if contended and not self.learn_contention:
            pass  # the first session's rule: every step refines the base
        elif contended and quiet_ratio >= 1.0:
            # The uncontended parts are known from calibration and quiet steps:
            # what the step took beyond them is the others' doing.
            # Slower than the base corrections: "contended" only says another
            # lane was busy at the step's end, so one step says less here.
            # Until enough steps are seen, a running mean (from a 0 it only
            # started at, an average's first steps would say too little).
            extra = min(quiet_ratio - 1.0, self.max_contention)
            if beside_prefill:
                n, known = self.prefill_contended_samples, self.prefill_contention_known
                slow = a / 4 if known else max(a / 4, 1 / (n + 1))
                self.prefill_contention += slow * (extra - self.prefill_contention)
                self.prefill_contended_samples += 1
            else:
                n, known = self.contended_samples, self.contention_known
                slow = a / 4 if known else max(a / 4, 1 / (n + 1))
                self.contention += slow * (extra - self.contention)
                self.contended_samples += 1
            return
        elif contended:  # faster than even a quiet step: the base model is too slow
            if beside_prefill:
                self.prefill_contention *= 1 - a / 4
            else:
                self.contention *= 1 - a / 4
            ratio = min(max(quiet_ratio, 0.2), 5.0)
        # Attribute the error to whichever part dominated the step.
        if decode_part >= prefill_part:
            self.decode_correction *= (1 - a) + a * ratio
        else:
            self.prefill_correction *= (1 - a) + a * ratio

    @property
    def contention_known(self) -> bool:
        """Learned from enough contended steps, here or in the last run."""
        return self.contention_stored or self.contended_samples >= SETTLED_CONTENDED_STEPS

    @property
    def prefill_contention_known(self) -> bool:
        return (self.prefill_contention_stored
                or self.prefill_contended_samples >= SETTLED_CONTENDED_STEPS)

    def start_contention(self, stored: float | None, prefill: float | None = None) -> None:
        """Start from the contention the last run here learned, if any."""
        if stored is not None:
            self.contention = min(max(stored, 0.0), self.max_contention)
            self.contention_stored = True
        if prefill is not None:
            self.prefill_contention = min(max(prefill, 0.0), self.max_contention)
            self.prefill_contention_stored = True

    @property
    def mean_abs_error(self) -> float | None:
        return sum(self.abs_errors) / len(self.abs_errors) if self.abs_errors else None

    def slowed(self, factor: float) -> "CostModel":
        """This model for a lane whose every step lasts `factor` times as long
        (LaneConfig.slowdown: a slower device in what-if benchmarks)."""
        if factor == 1:
            return self
        return CostModel(self.prefill_tps / factor,
                         [(c, tps / factor) for c, tps in self.decode_points],
                         self.batch_alpha, self.contention, smoothing=self.smoothing)

    def paced(self, min_step_s: float, prompt_tokens: int) -> "CostModel":
        """This model for a lane whose every step lasts at least `min_step_s`
        (LaneConfig pacing: a slower device in tests and benchmarks), as its
        calibration (a `prompt_tokens` prefill, one-stream decode steps, the
        batch factor at a batch of PACED_BATCH) would have measured it paced."""
        if min_step_s <= 0:
            return self
        # A linear batch factor cannot be max(real, pace) at every batch: it
        # is fitted at a batch of PACED_BATCH, so that a paced lane's batch
        # is not believed free where the real steps outgrow the pace.
        one = 1.0 / self.decode_points[0][1]
        many = one * (1.0 + self.batch_alpha * (PACED_BATCH - 1))
        paced_one, paced_many = max(one, min_step_s), max(many, min_step_s)
        alpha = (paced_many / paced_one - 1.0) / (PACED_BATCH - 1)
        return CostModel(min(self.prefill_tps, prompt_tokens / min_step_s),
                         [(c, min(tps, 1.0 / min_step_s)) for c, tps in self.decode_points],
                         min(1.0, max(0.0, alpha)), self.contention, smoothing=self.smoothing)

    def copy(self) -> "CostModel":
        return CostModel(self.prefill_tps, list(self.decode_points), self.batch_alpha,
                         self.contention, self.prefill_correction, self.decode_correction,
                         self.smoothing, contention_stored=self.contention_stored,
                         prefill_contention=self.prefill_contention,
                         prefill_contention_stored=self.prefill_contention_stored)
