"""What the engine says of its lanes: a `LaneInfo` each, a `LaneSample` per
lane about ten times a second, from its sampler thread (which also runs the
watchdog, engine/watchdog.py), and a sentence per lane on what its cost
model believes (the dock's lane cards)."""

from __future__ import annotations

import threading
import time
import traceback
from typing import Callable, Iterable

from .core import priority
from .core.events import LaneSample
from .core.laneconfig import LaneInfo
from .runtime.lane import Lane
from .watchdog import watch


def lane_info(lanes: Iterable[Lane]) -> list[LaneInfo]:
    """The running lanes, in order: name, device, role, phase, why one
    failed, and why one restarts (until it serves again)."""
    return [LaneInfo(lane.name, lane.device, lane.kind, lane.failed, lane.phase,
                     lane.restarted_after if lane.warming_up and not lane.failed else None)
            for lane in lanes]


def describe_lanes(lanes: Iterable[Lane]) -> dict[str, str]:
    """One line per lane on what its cost model believes now, for people."""
    lines = {}
    for lane in lanes:
        name = lane.name
        cost, device = lane.cost, lane.device.upper()
        if lane.failed:
            lines[name] = lane.failed
        elif lane.warming_up and lane.restarted_after:
            lines[name] = (f"{device} lane: {lane.phase} after a failure "
                           f"({lane.restarted_after}); routed around until ready")
        elif lane.warming_up:
            since = time.monotonic() - (lane.started_at or time.monotonic())
            what = ("compiling and timing its kernels" if lane.phase != "calibrating"
                    else "timing its steps")
            lines[name] = (f"{device} lane: {lane.phase} ({what}, {since:.0f} s so far); "
                           "routed around until ready")
        elif cost is None:
            lines[name] = (f"{device} lane; not calibrated (one lane: nothing to route)"
                           if lane.phase != "calibrating" else f"{device} lane: timing its steps")
        else:
            prefill = cost.prefill_tps / cost.prefill_correction
            lines[name] = (
                f"{device} lane: prefill {prefill:.0f} tok/s, one-stream decode "
                f"{1 / cost.decode_step_s(1, 0):.1f} tok/s, batch "
                f"factor {cost.batch_alpha:.2f}, steps {1 + cost.contention:.2f}x as long "
                f"while other lanes run (contention {cost.contention:.2f})")
    return lines


def sample_lanes(lanes: dict[str, Lane], emit: Callable[[LaneSample], None],
                 stop: threading.Event, interval: float, nice: int, watchdog_s: float,
                 context_length: int, prefix_bytes: Callable[[], int],
                 remote_samples: Callable[[int], list[LaneSample]] = lambda n: []) -> None:
    """The sampler thread's loop: the watchdog, then a sample per lane, every
    `interval` s until `stop` is set."""
    priority.lower_thread(nice)
    last = {name: (lane, lane.stats.busy_s, lane.stats.output_tokens, time.perf_counter())
            for name, lane in lanes.items()}
    while not stop.wait(interval):
        try:
            watch(lanes.values(), time.monotonic(), watchdog_s, context_length)
        except Exception:  # the watchdog must not stop the samples
            traceback.print_exc()
        for name, lane in lanes.items():
            # A step still running counts as busy so far (a long prefill
            # chunk is not "0% busy" until it ends).
            since = lane.in_step_since
            running = time.monotonic() - since if since is not None else 0.0
            busy, out, t = (lane.stats.busy_s + running, lane.stats.output_tokens,
                            time.perf_counter())
            was, busy0, out0, t0 = last.get(name, (None, 0.0, 0, t))
            if was is not lane:  # restarted (engine/runtime/lane_restart.py): its counts begin at 0
                busy0, out0 = 0.0, 0
            last[name] = (lane, busy, out, t)
            dt = max(t - t0, 1e-6)
            emit(LaneSample(
                lane=name, device=lane.device,
                busy_fraction=min(1.0, max(0.0, busy - busy0) / dt),
                tokens_per_s=(out - out0) / dt, batch_size=lane.batch_size,
                queue_depth=lane.queue_depth, kv_bytes=lane.kv_bytes,
                prefix_cache_bytes=prefix_bytes(), phase=lane.phase,
                prefill_left=lane.scheduler.prefill_left, drafted=lane.stats.drafted,
                accepted_drafts=lane.stats.accepted_drafts,
                drafts_on=(lane.draft_site.placement.reason
                           if lane.draft_model is not None else "")))
        try:
            for sample in remote_samples(prefix_bytes()):
                emit(sample)
        except Exception:
            traceback.print_exc()
