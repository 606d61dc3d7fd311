"""Where a draft model runs (issue 32): the scheduler places draft work as
it places requests, on the lane whose device drafts soonest. Plain Python
over measured numbers; the lane's runtime runs the draft's forwards on the
chosen lane's device (engine/runtime/draft_model.py).

A verifying lane keeps, per candidate lane, the measured seconds per
drafted token when its draft ran on that lane's device (a running mean;
the other lane's own work shows in it as contention, since both compete
for that device), and drafts where that is least. A candidate not measured
yet is tried once, its own lane first; one not used for `retry_every`
proposals is tried again, so a lane that got busy, or idle, is noticed. In
gpu-only mode (or with one lane) the verifying lane's own device is the
only candidate: the CPU lane is off limits there."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DraftPlacement:
    home: str  # the verifying lane
    retry_every: int = 64  # proposals before an unused candidate is measured again
    weight: float = 0.3  # of the newest measurement in the running mean
    seconds: dict[str, float] = field(default_factory=dict)  # lane -> s per drafted token
    reason: str = ""  # why the last choice (the lane card shows it)
    _unused: dict[str, int] = field(default_factory=dict)

    def choose(self, candidates: list[str]) -> str:
        """The lane whose device drafts next, among `candidates` (lane names;
        the home lane is always one)."""
        lanes = [self.home] + [c for c in candidates if c != self.home]
        for lane in lanes:
            if lane not in self.seconds:
                self.reason = f"{lane.upper()}: not measured yet"
                return lane
        for lane in lanes:
            if self._unused.get(lane, 0) >= self.retry_every:
                self.reason = f"{lane.upper()}: measured again"
                self._unused[lane] = 0
                return lane
        best = min(lanes, key=lambda lane: self.seconds[lane])
        others = ", ".join(f"{lane.upper()} {self.seconds[lane] * 1e3:.1f}" for lane in lanes
                           if lane != best)
        self.reason = (f"{best.upper()}: {self.seconds[best] * 1e3:.1f} ms a drafted token"
                       + (f" (against {others})" if others else ""))
        return best

    def observe(self, lane: str, seconds_per_token: float) -> None:
        """A proposal drafted on `lane`'s device took this long per token."""
        for other in self._unused:
            self._unused[other] += 1
        self._unused[lane] = 0
        last = self.seconds.get(lane)
        self.seconds[lane] = (seconds_per_token if last is None
                              else last + self.weight * (seconds_per_token - last))
