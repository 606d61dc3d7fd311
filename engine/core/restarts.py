"""Whether a lane that failed mid-step is restarted: plain data, no threads.

A lane whose step raised (a device fault, a bug on a path no request owns)
is restarted by the engine (engine/runtime/lane_restart.py) at most `limit` times
within `window_s` seconds; past that it stays off, and the reason says it
failed repeatedly. Tested without a model (tests/test_lane_restart.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

RESTARTS = 3  # restarts of one lane allowed ...
WINDOW_S = 600.0  # ... within this many seconds


@dataclass
class RestartBudget:
    """Each lane's recent restarts (monotonic seconds), and the rule."""

    limit: int = RESTARTS
    window_s: float = WINDOW_S
    times: dict[str, list[float]] = field(default_factory=dict)

    def recent(self, lane: str, now: float) -> list[float]:
        """The restarts of `lane` within the window before `now`."""
        kept = [t for t in self.times.get(lane, []) if now - t < self.window_s]
        self.times[lane] = kept
        return kept

    def take(self, lane: str, now: float) -> bool:
        """Whether `lane`, failed at `now`, restarts (and count it if so)."""
        recent = self.recent(lane, now)
        if len(recent) >= self.limit:
            return False
        recent.append(now)
        return True

    def restarted(self, why: str, lane: str, now: float) -> str:
        """The failure's message as people read it once the lane restarts."""
        n = len(self.recent(lane, now))
        return (f"{why}; restarting the lane (restart {n} of at most {self.limit} "
                f"in {self._window()})")

    def given_up(self, why: str, lane: str, now: float) -> str:
        """The failure's message once the lane stays off."""
        n = len(self.recent(lane, now))
        return (f"{why}; it failed repeatedly ({n + 1} times in {self._window()}, "
                f"restarted {n}): it stays off")

    def _window(self) -> str:
        minutes = self.window_s / 60
        return f"{minutes:.0f} minutes" if minutes >= 1 else f"{self.window_s:.0f} s"
