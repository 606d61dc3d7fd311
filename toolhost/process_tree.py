"""A stdio tool server's processes end with it.

The SDK starts a server in a new session (its own process group) and, at
close, shuts its stdin and waits; only a server that outlives that wait has
its group killed. A server that leaves when its stdin closes leaves its
children running. Here:
- `spawn_options()`: on Linux the server gets a parent-death signal
  (prctl PR_SET_PDEATHSIG, SIGKILL): killed with Tandem, even by SIGKILL;
- `end_group(pid)`: after the session closes, the server's process group
  gets SIGTERM, then SIGKILL 2 s later, whether or not its leader has gone.

What is not caught: a child that leaves the group (`setsid`, a daemon's
double fork) escapes both; so does a child of a server killed with Tandem
(the parent-death signal is the server's alone, not passed to its
children). A cgroup would hold them; Tandem does not make one."""

from __future__ import annotations

import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
GRACE_S = 2.0  # between SIGTERM and SIGKILL


def spawn_options() -> dict:
    """Extra keyword arguments for starting a server (subprocess.Popen's)."""
    if not sys.platform.startswith("linux"):
        return {}
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                          ctypes.c_ulong]
        prctl.restype = ctypes.c_int
    except (OSError, AttributeError):
        return {}
    parent, kill = os.getpid(), int(signal.SIGKILL)

    def in_the_child() -> None:  # between fork and exec: system calls only
        prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != parent:  # Tandem died before the signal was set
            os._exit(1)

    return {"preexec_fn": in_the_child}


async def end_group(process) -> None:
    """End every process left in `process`'s group (its pid: the SDK starts
    it in a new session), even when `process` itself has exited."""
    if sys.platform == "win32":  # a Job Object holds them there (the SDK's)
        return
    from mcp.os.posix.utilities import terminate_posix_process_tree

    await terminate_posix_process_tree(process, GRACE_S)
