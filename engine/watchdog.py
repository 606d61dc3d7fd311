"""The engine's watchdog, run by its sampler thread about ten times a second.

A lane that is not serving `warm_up_s` after it started (a JIT or a probe
that never ends) is turned off with the reason shown, and the other lanes
serve; a step that runs far longer than its lane could need (a hung device)
fails that lane's requests with a clear error. Both first write every
thread's stack to stderr (faulthandler), to say where it hung. A lane thread
stuck in the device cannot be interrupted: it takes no more work when it
returns (engine/runtime/lane.py `fail_start`, `stall`).
"""

from __future__ import annotations

import faulthandler
import sys
from typing import Iterable

from .runtime.lane import Lane

WARM_UP_S = 300.0  # a lane not serving this long after it started is turned off
WATCHDOG_S = 60.0  # the least time a step may run before the watchdog acts


def watch(lanes: Iterable[Lane], now: float, watchdog_s: float, context_length: int) -> None:
    """One look at every lane (`now`: time.monotonic())."""
    for lane in lanes:
        if lane.failed is not None:
            continue
        if not lane.ready.is_set():
            started = lane.started_at or now
            if now - started > lane.warm_up_s:
                why = (f"{lane.name.upper()} lane turned off: still {lane.phase} after "
                       f"{now - started:.1f} s (start-up deadline {lane.warm_up_s:.3g} s); "
                       "the other lanes serve")
                dump_stacks(why)
                lane.fail_start(why)
            continue
        since = lane.in_step_since
        if since is None:
            continue
        limit = step_limit(lane, watchdog_s, context_length)
        if now - since > limit:
            why = (f"{lane.name.upper()} lane stopped by the watchdog: one step ran "
                   f"{now - since:.1f} s (it allows {limit:.3g} s); its requests ended")
            dump_stacks(why)
            lane.stall(why)


def step_limit(lane: Lane, watchdog_s: float, context_length: int) -> float:
    """How long one step may run: `watchdog_s`, or ten times the longest step
    the lane's cost model expects, or twenty times its warm-up (which ran a
    96-token prefill and a few decode steps; on a GPU it includes compiling
    kernels, as a new shape's first step does), whichever is longest."""
    limit = max(watchdog_s, 20 * (lane.warm_up_seconds or 0.0))
    cost = lane.cost
    if cost is not None:
        config = lane.config
        longest = cost.step_s(max(lane.batch_size, 1), context_length,
                              max(config.prefill_chunk, config.prefill_chunk_busy),
                              contended=True)
        limit = max(limit, 10 * longest)
    return limit


def dump_stacks(why: str) -> None:
    """Every thread's stack to stderr (the log), with why."""
    print(f"tandem watchdog: {why}; every thread's stack follows", file=sys.stderr, flush=True)
    try:
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    except (AttributeError, ValueError, OSError):  # no real stderr (a windowed app)
        pass
