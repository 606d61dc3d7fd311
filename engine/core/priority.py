"""Run the engine's threads at a lower CPU priority than the app's GUI thread.

On a machine with few cores the lanes (and the BLAS threads they drive) keep
every core busy; the GUI thread then waits for a time slice and the window
stutters. Linux schedules threads, not processes, and an unprivileged process
may raise the niceness of its own threads, so the engine's threads take
`nice` and the GUI thread keeps the default. Elsewhere this does nothing:
macOS already favours an app's main thread (user-interactive QoS), and there
a thread id is not a pid, so `setpriority` must not be called with one.
"""

from __future__ import annotations

import os
import sys
import threading


def supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "setpriority")


def thread_ids() -> set[int]:
    """Kernel ids of this process's threads (Linux); empty elsewhere."""
    if not supported():
        return set()
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def lower_thread(nice: int, tid: int | None = None) -> bool:
    """Raise thread `tid`'s niceness (default: the calling thread) to at least
    `nice`. Threads it starts afterwards inherit it. False if not done."""
    if nice <= 0 or not supported():
        return False
    tid = threading.get_native_id() if tid is None else tid
    try:
        if os.getpriority(os.PRIO_PROCESS, tid) >= nice:
            return True
        os.setpriority(os.PRIO_PROCESS, tid, nice)
        return True
    except OSError:  # the thread exited, or the system does not allow it
        return False


def niceness(tid: int | None = None) -> int | None:
    if not supported():
        return None
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id() if tid is None else tid)
    except OSError:
        return None
