"""What hybrid bought: each finished request's real time to finish beside
the router's estimate of what it would have taken on the GPU alone, summed
over the last minutes, with the router's own measured error.

Qt-free, plain data. The GPU-only figure is a prediction (the cost model's,
made when the request was routed: the whole request on the GPU lane, with the
GPU's queue as it was then), never a measurement; the sum counts only
requests that ran on the CPU for some phase, where the difference is the
hybrid's doing (a request that stayed on the GPU would add only the
predictor's noise). The predictor's error is measured on every request it
predicted: |real - predicted| / real for the plan it chose.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

WINDOW_S = 300.0


@dataclass(frozen=True)
class Outcome:
    request_id: str
    at: float  # when it finished (monotonic)
    actual_s: float  # submit to finish
    predicted_s: float | None  # the chosen plan, as the router predicted it
    gpu_only_s: float | None  # the router's estimate with the GPU lane alone
    used_cpu: bool  # some phase ran on a lane that is not a GPU

    @property
    def saved_s(self) -> float | None:
        return self.gpu_only_s - self.actual_s if self.gpu_only_s is not None else None


@dataclass(frozen=True)
class Summary:
    saved_s: float  # over requests that used the CPU and have a GPU-only estimate
    estimated: int  # how many of those
    used_cpu: int  # requests that ran on the CPU for some phase
    finished: int
    median_error: float | None  # the predictor's, as a fraction


class HybridLedger:
    def __init__(self, window_s: float = WINDOW_S):
        self.window_s = window_s
        self._routed: dict[str, tuple[float | None, float | None]] = {}
        self.outcomes: deque[Outcome] = deque(maxlen=2000)
        # What the baseline lanes are called, and where else hybrid sends work:
        # ("the GPU", "the CPU") beside a GPU; ("this machine", "a remote") with a
        # CPU and a remote lane (the baseline lanes are then the local ones).
        self.baseline, self.elsewhere = "the GPU", "the CPU"
        # The last time the router kept a lane idle, and why: (at, lane, why).
        self.left_idle: tuple[float, str, str] | None = None

    def routed(self, request_id: str, predicted_done_s: float | None,
               predicted_s: dict[str, float], gpu_lanes: set[str],
               left_idle: tuple[tuple[str, str], ...] = (), at: float | None = None) -> None:
        """A new request's placement (its first Routed event); `left_idle`: the
        lanes the router kept out and why (Routed.left_idle)."""
        if left_idle and at is not None:
            name, why = left_idle[0]
            self.left_idle = (at, name.upper(), why)
        if request_id in self._routed:
            return
        gpu = [predicted_s[name] for name in gpu_lanes if name in predicted_s]
        self._routed[request_id] = (predicted_done_s, min(gpu) if gpu else None)
        if len(self._routed) > 4000:  # requests that never finished here
            self._routed.pop(next(iter(self._routed)))

    def finished(self, request_id: str, reason: str, e2e_s: float, at: float,
                 lanes: tuple[tuple[str, str], ...], gpu_lanes: set[str]) -> Outcome | None:
        predicted, gpu_only = self._routed.pop(request_id, (None, None))
        if reason not in ("stop", "length"):
            return None
        outcome = Outcome(request_id, at, e2e_s, predicted, gpu_only,
                          any(lane not in gpu_lanes for _, lane in lanes))
        self.outcomes.append(outcome)
        return outcome

    def summary(self, now: float) -> Summary:
        recent = [o for o in self.outcomes if now - o.at <= self.window_s]
        hybrid = [o for o in recent if o.used_cpu and o.gpu_only_s is not None]
        errors = [abs(o.actual_s - o.predicted_s) / o.actual_s for o in self.outcomes
                  if o.predicted_s is not None and o.actual_s > 0]
        return Summary(sum(o.saved_s for o in hybrid), len(hybrid),
                       sum(o.used_cpu for o in recent), len(recent),
                       statistics.median(errors) if errors else None)

    def describe(self, now: float) -> str:
        """'Hybrid saved ~14 s over the last 5 minutes (estimate) ...'."""
        s = self.summary(now)
        minutes = f"{self.window_s / 60:.0f} minutes"
        if not s.finished:
            return f"No answers finished in the last {minutes}."
        went = (f"{s.used_cpu} of {s.finished} requests went to {self.elsewhere}"
                if s.used_cpu else f"all {s.finished} requests stayed on {self.baseline}")
        if not s.estimated:
            why = ""
            if not s.used_cpu and self.left_idle and now - self.left_idle[0] <= self.window_s:
                _, lane, reason = self.left_idle
                why = f": the router left the {lane} lane idle, since {reason}"
            elif not s.used_cpu:
                why = (f": the router predicted each would finish sooner there "
                       f"than on {self.elsewhere}")
            return f"Over the last {minutes}, {went}{why}."
        verb = "saved" if s.saved_s >= 0 else "cost"
        error = (f"; the router's predictions miss by a median {s.median_error:.0%}"
                 if s.median_error is not None else "")
        return (f"Hybrid {verb} ~{abs(s.saved_s):.0f} s over the last {minutes}: {went} "
                f"(against the router's estimates for {self.baseline} alone{error}).")


def note(outcome: Outcome, median_error: float | None, baseline: str = "the GPU") -> str:
    """One request: 'finished in 4.1 s; GPU-only estimate 6.3 s (±18%)'."""
    text = f"finished in {outcome.actual_s:.1f} s"
    if outcome.gpu_only_s is not None:
        error = f", the router's median error {median_error:.0%}" if median_error else ""
        label = baseline.removeprefix("the ")
        text += f"; {label[0].upper()}{label[1:]} alone (estimate{error}): {outcome.gpu_only_s:.1f} s"
    return text
