"""A test hook: hold a thread at a named stage of its work, so that a test
ends the process right there (tests/test_exit_stages.py).

With `TANDEM_PAUSE_AT=<stage>` and `TANDEM_PAUSE_FD=<fd>` (the read end of a
pipe the test passed down) in the environment, the first thread to reach
`at(<stage>)` says "tandem: paused at <stage>" on stderr, then blocks until
the test writes a byte to the pipe (or closes it), and goes on with its
work; with b"s" (the test sent a stop signal first) only once the process
has handled the signal (`signalled`, called by app/cli_exit.py's handlers),
so the stage is the one the signal lands in, however loaded the machine. The stages: "loading" (a lane warming up), "prefilling" (a lane in a
prefill step), "saving-kv" (the disk tier's writer, before a file), "restoring" (the
restorer, before it reads) and "finishing" (the engine's delivery thread,
before it hands over a request's Finished: the answer is whole, its reader
not told yet). Without them (always, outside
tests) `at` returns at once.
"""

from __future__ import annotations

import os
import sys
import threading

STAGES = ("loading", "prefilling", "saving-kv", "restoring", "finishing")
_stage = os.environ.get("TANDEM_PAUSE_AT") or None
_fd = os.environ.get("TANDEM_PAUSE_FD") or None
_taken = threading.Lock()  # held for good by the one thread that pauses
_signalled = threading.Event()
SIGNAL_WAIT_S = 60.0  # at most: a handler that never runs must not hang the test


def at(stage: str) -> None:
    """Pause here if the environment asks for `stage` (once per process)."""
    if stage != _stage or _fd is None or not _taken.acquire(blocking=False):
        return
    print(f"tandem: paused at {stage}", file=sys.stderr, flush=True)
    try:
        sent = os.read(int(_fd), 1)
    except (OSError, ValueError):  # not a pipe given down: no pause
        return
    if sent == b"s":
        _signalled.wait(SIGNAL_WAIT_S)


def signalled() -> None:
    """The process handled a stop signal (a handler on the main thread)."""
    _signalled.set()
