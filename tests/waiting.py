"""Waiting for a condition no event announces (a server's `started` flag, a
process's state in /proc, a list another thread appends to): checked at once
and then every 10 ms, over as soon as it holds. Never a fixed sleep; where an
event exists (threading.Event, a Condition, a Qt signal: qtbot.waitUntil),
wait on it instead."""

from __future__ import annotations

import threading
import time
from typing import Callable

POLL_S = 0.01


def wait_until(condition: Callable[[], object], timeout: float = 30.0) -> bool:
    """Whether `condition()` came to hold within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()  # never set: its wait is the pause between checks
    while not condition():
        if time.monotonic() > deadline:
            return False
        pause.wait(POLL_S)
    return True
