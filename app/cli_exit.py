"""How `tandem generate` and `tandem serve` stop on a signal, in order: the
engine closes whole (its lanes and the disk tier's writer and restorer park,
the last KV save is written), then the process ends normally.

- `tandem generate`: Ctrl+C cancels the answer (what it had is printed, and
  its stats) and exits with `INTERRUPTED`, 130, the shell's code for a
  command cut short (a script must not take half an answer for a whole one).
  Ctrl+C once the answer is whole (its KV being saved) is held: it exits 0.
- `tandem serve`: SIGINT (Ctrl+C) and SIGTERM (a service manager) stop it
  gracefully, at any stage, and it exits 0: a stop asked for is its normal
  end (uvicorn would raise the signal again once stopped, ending with it).

A signal that arrived while the engine closes waits until it has closed
(`close_engine`): the close is bounded, and an exception in the middle of it
would leave threads working with MLX as the interpreter finalizes, which
aborts the process or segfaults (engine/runtime/lanethreads.py).

Then `end_now`: with the engine closed and its saves written, both commands
end the process with os._exit, skipping the interpreter's teardown. Python
3.11 ends each daemon thread that wakes during that teardown with
pthread_exit, which no thread inside MLX (its thread-local destructors take
the GIL: an abort) or Rust (llguidance: a segfault) survives; the lane
threads live until the process ends by design, and what the ordered close
cannot reach (Ctrl+C inside the engine's constructor, a restore or a save
past its time limit) must not turn into a crash after the answer."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import NoReturn

INTERRUPTED = 130  # 128 + SIGINT
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def handled(handler: Callable, signals=STOP_SIGNALS) -> Iterator[None]:
    """`handler(signum, frame)` for `signals` while inside, then the handlers
    before; nothing changes off the main thread (only it may set them)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    def handle(signum, frame):
        _told()
        return handler(signum, frame)

    before = {sig: signal.signal(sig, handle) for sig in signals}
    try:
        yield
    finally:
        for sig, old in before.items():
            signal.signal(sig, old)


def _told() -> None:
    """Tell the engine's test hook that a stop signal was handled (a thread
    it holds goes on only then: tests/test_exit_stages.py)."""
    pauses = sys.modules.get("engine.runtime.pauses")
    if pauses is not None:
        pauses.signalled()


def _interrupt(signum, frame) -> None:
    _told()
    raise KeyboardInterrupt


def interrupt_on_ctrl_c() -> None:
    """SIGINT raises KeyboardInterrupt as Python's own handler does (and tells
    the test hook); main thread only."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _interrupt)


def term_as_interrupt() -> contextlib.AbstractContextManager:
    """SIGTERM ends what runs as Ctrl+C does (KeyboardInterrupt), so the
    engine is closed in order instead of the process being killed."""
    return handled(_interrupt, (signal.SIGTERM,))


def close_engine(engine) -> list[int]:
    """`engine.close()` with SIGINT and SIGTERM held until it returns; the
    signals that arrived meanwhile."""
    arrived: list[int] = []
    with handled(lambda signum, frame: arrived.append(signum)):
        engine.close()
    return arrived


def end_now(code: int) -> NoReturn:
    """Flush stdout and stderr, then end the process with `code` at once
    (os._exit: no interpreter teardown; see above)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed, or a pipe gone
            pass
    os._exit(code)


def crash_stacks() -> None:
    """A crash in native code (MLX, Qt) prints every thread's Python stack to
    stderr before the process dies, so a report says where it was; not where
    there is no stderr (a windowed bundle)."""
    import faulthandler

    try:
        if sys.stderr is not None and sys.stderr.fileno() >= 0:
            faulthandler.enable(all_threads=True)
    except (AttributeError, OSError, ValueError, RuntimeError):  # no real stderr
        pass
