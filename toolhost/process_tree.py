"""A stdio tool server's processes end with it.

The SDK starts a server in a new session (its own process group) and, at
close, shuts its stdin and waits; only a server that outlives that wait has
its group killed. A server that leaves when its stdin closes leaves its
children running. Here:
- `command_line()`: on Linux the server gets a parent-death signal
  (PR_SET_PDEATHSIG, SIGKILL, set by util-linux's `setpriv`): killed with
  Tandem, even by SIGKILL (the signal follows the thread that started it:
  the host's loop thread, which lives until the host closes);
- `end_group(pid)`: after the session closes, the server's process group
  gets SIGTERM, then SIGKILL 2 s later, whether or not its leader has gone.

What is not caught: a child that leaves the group (`setsid`, a daemon's
double fork) escapes both; so does a child of a server killed with Tandem
(the parent-death signal is the server's alone, not passed to its
children); without `setpriv` (not Linux, a system without util-linux)
there is no parent-death signal, and Tandem killed in the instant between
the server's start and `setpriv`'s call leaves it running (a server still
leaves when its stdin closes). A cgroup would hold them all; Tandem does
not make one."""

from __future__ import annotations

import errno
import os
import shutil
import sys

GRACE_S = 2.0  # between SIGTERM and SIGKILL


def command_line(command: str, args: list[str], env: dict | None) -> list[str]:
    """The server's command line: on Linux through util-linux's `setpriv
    --pdeathsig KILL` where it is installed (it sets the signal, then runs
    the server: no Python runs between fork and exec in a threaded Tandem);
    elsewhere as it is. FileNotFoundError when the command is not found."""
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    if setpriv is None:
        return [command, *args]
    path = shutil.which(command, path=(env if env is not None else os.environ).get("PATH"))
    if path is None:  # said as a spawn says it (setpriv would only exit 127)
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)
    return [setpriv, "--pdeathsig", "KILL", "--", path, *args]


async def end_group(process) -> None:
    """End every process left in `process`'s group (its pid: the SDK starts
    it in a new session), even when `process` itself has exited."""
    if sys.platform == "win32":  # a Job Object holds them there (the SDK's)
        return
    from mcp.os.posix.utilities import terminate_posix_process_tree

    await terminate_posix_process_tree(process, GRACE_S)
