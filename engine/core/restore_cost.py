"""Whether to read a prompt's KV back from disk or prefill it (issue 33):
plain Python over measured numbers. Reading N tokens' KV costs its bytes
at the disk tier's measured speed (checks included); prefilling them costs
N tokens at the fastest lane's prefill rate. A fast GPU can prefill a few
thousand tokens sooner than a slow disk gives them back; a CPU never can."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DiskSpeed:
    """Bytes a second the disk tier reads back (files read, checked, and
    put in the RAM prefix cache), learned from each restore."""

    bytes_per_s: float = 250e6  # a prior until the first restore
    weight: float = 0.3  # of the newest restore in the running estimate
    measured: int = 0

    def observe(self, nbytes: int, seconds: float) -> None:
        if nbytes <= 0 or seconds <= 0:
            return
        rate = nbytes / seconds
        self.bytes_per_s = rate if not self.measured else (
            self.bytes_per_s + self.weight * (rate - self.bytes_per_s))
        self.measured += 1

    def read_s(self, nbytes: int) -> float:
        return nbytes / self.bytes_per_s


def restore_pays(tokens: int, nbytes: int, speed: DiskSpeed,
                 prefill_rates: list[float | None]) -> tuple[bool, str]:
    """(read it back?, why, in words) for `tokens` of KV in `nbytes` on disk,
    given each lane's prefill rate (tokens/s; None: not measured yet)."""
    read = speed.read_s(nbytes)
    rates = [r for r in prefill_rates if r]
    if not rates:
        return True, f"reading {tokens:,} tokens from disk (~{read:.2f} s): no lane's prefill rate is known yet"
    prefill = tokens / max(rates)
    if read < prefill:
        return True, (f"reading {tokens:,} tokens from disk (~{read:.2f} s) beats prefilling "
                      f"them (~{prefill:.2f} s)")
    return False, (f"prefilling {tokens:,} tokens (~{prefill:.2f} s) beats reading them "
                   f"from disk (~{read:.2f} s)")
