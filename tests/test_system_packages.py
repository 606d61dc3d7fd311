"""tools/system_packages.sh, the system set-up `make run`, `make test` and
.ci/run share (issue 49): run under bash on a PATH of stand-ins for uname,
id, ldconfig, apt-get and sudo that log what they were asked, so that each
case (everything there, OpenBLAS missing as root, through sudo with and
without a terminal, no apt-get, macOS) is checked without touching the
machine's packages."""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "system_packages.sh"
REAL_TOOLS = ("awk", "grep", "cat", "env")  # what the script runs besides the stand-ins


def _listed() -> list[tuple[str, list[str]]]:
    """(package, what shows it installed) from the script's own table."""
    text = SCRIPT.read_text()
    table = text[text.index('PACKAGES="') + len('PACKAGES="'):]
    rows = [line.split() for line in table[:table.index('"')].splitlines() if line.strip()]
    return [(package, shown.split("|")) for package, shown in rows]


def _stand_ins(tmp_path: Path, system="Linux", uid=0, apt=True, sudo="asks",
               missing=()) -> dict:
    """A bin folder for PATH: the real awk, grep, cat and env, and stand-ins
    that log their arguments. `missing`: packages whose sonames the linker's
    cache lacks. `sudo`: None (absent), "asks" (needs a password) or "free"."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(parents=True)
    for tool in REAL_TOOLS:
        (bin_ / tool).symlink_to(shutil.which(tool))
    known = [name for package, shown in _listed() if package not in missing
             for name in shown if not name.startswith("/")]
    cache = tmp_path / "ld.so.cache.txt"
    cache.write_text(f"{len(known)} libs found in cache `/etc/ld.so.cache'\n" + "".join(
        f"\t{name} (libc6,x86-64) => /lib/x86_64-linux-gnu/{name}\n" for name in known))
    log = tmp_path / "log"
    stubs = {"uname": f"echo {system}", "id": f"echo {uid}", "ldconfig": f"cat {cache}"}
    if apt:
        stubs["apt-get"] = f'echo "apt-get $*" >> {log}'
    if sudo:
        stubs["sudo"] = (f'if [ "$1" = -n ]; then {"exit 0" if sudo == "free" else "exit 1"}; fi\n'
                         f'echo "sudo $1" >> {log}\nexec "$@"')
    for name, body in stubs.items():
        (bin_ / name).write_text(f"#!{shutil.which('bash')}\n{body}\n")
        (bin_ / name).chmod(0o755)
    return {"PATH": str(bin_), "LOG": str(log)}


def _run(env: dict, *args: str, terminal: bool = False) -> tuple[int, str, list[str]]:
    """The script's exit code, its stderr and the stand-ins' log."""
    if terminal:
        leader, follower = pty.openpty()
        stdin = follower
    else:
        stdin = subprocess.DEVNULL
    try:
        done = subprocess.run([shutil.which("bash"), str(SCRIPT), *args], stdin=stdin,
                              env=env, capture_output=True, text=True, timeout=60)
    finally:
        if terminal:
            os.close(leader)
            os.close(follower)
    log = Path(env["LOG"])
    return done.returncode, done.stderr, log.read_text().splitlines() if log.exists() else []


def _present_by_path() -> set[str]:
    """Packages shown by a file (a font) that this machine has: the stand-ins
    cannot hide a file."""
    return {package for package, shown in _listed()
            if all(name.startswith("/") for name in shown) and any(map(os.path.exists, shown))}


def test_everything_there_does_nothing_and_asks_nothing(tmp_path):
    env = _stand_ins(tmp_path, uid=1000)
    assert _run(env) == (0, "", [])
    assert _run(env, terminal=True) == (0, "", [])


def test_missing_openblas_as_root_installs_what_is_missing(tmp_path):
    env = _stand_ins(tmp_path, missing={"libopenblas0-pthread", "libxcb-cursor0"})
    rc, err, log = _run(env)
    assert rc == 0 and "libopenblas0-pthread libxcb-cursor0" in err
    assert log == ["apt-get update -qq", "apt-get install -y -qq --no-install-recommends "
                   "libopenblas0-pthread libxcb-cursor0"]


@pytest.mark.parametrize("sudo", ["free", "asks"])
def test_a_user_installs_through_sudo_where_it_needs_no_password_or_can_ask(tmp_path, sudo):
    env = _stand_ins(tmp_path, uid=1000, sudo=sudo, missing={"libopenblas0-pthread"})
    rc, err, log = _run(env, terminal=sudo == "asks")
    assert rc == 0 and "through sudo" in err
    assert log == ["sudo env", "apt-get update -qq", "sudo env",
                   "apt-get install -y -qq --no-install-recommends libopenblas0-pthread"]


@pytest.mark.parametrize("sudo", ["asks", None])
def test_without_a_way_to_ask_it_stops_with_the_one_command(tmp_path, sudo):
    env = _stand_ins(tmp_path, uid=1000, sudo=sudo, missing={"libopenblas0-pthread"})
    rc, err, log = _run(env)  # no terminal: make in a script, an IDE
    assert rc == 1 and log == []
    assert "50x slower" in err and "sudo sh -c 'apt-get update && apt-get install -y " \
        "--no-install-recommends libopenblas0-pthread'" in err


def test_without_apt_get_it_names_what_to_install_and_stops(tmp_path):
    env = _stand_ins(tmp_path, apt=False, missing={"libopenblas0-pthread"})
    rc, err, log = _run(env)
    assert rc == 1 and log == [] and "libopenblas.so.0" in err and "package manager" in err
    assert _run(env, "--all")[0] == 0  # CI off Debian/Ubuntu: nothing to install with


def test_off_linux_nothing_is_needed(tmp_path):
    env = _stand_ins(tmp_path, system="Darwin", missing={p for p, _ in _listed()})
    assert _run(env) == (0, "", [])
    assert _run(env, "--all") == (0, "", [])


def test_ci_installs_every_package(tmp_path):
    env = _stand_ins(tmp_path)
    rc, _, log = _run(env, "--all")
    assert rc == 0 and log[-1].split()[5:] == [package for package, _ in _listed()]
    nothing_there = _stand_ins(tmp_path / "all", missing={p for p, _ in _listed()})
    rc, _, log = _run(nothing_there)
    assert log[-1].split()[5:] == [package for package, _ in _listed()
                                   if package not in _present_by_path()]


def test_the_list_is_the_one_the_makefile_and_ci_use():
    makefile = (ROOT / "Makefile").read_text()
    assert "tools/system_packages.sh" in makefile and "| system" in makefile
    assert "tools/system_packages.sh --all" in (ROOT / ".ci" / "run").read_text()
    found = subprocess.run([shutil.which("bash"), str(SCRIPT), "--list"], capture_output=True,
                           text=True, check=True).stdout.split()
    assert found == [package for package, _ in _listed()]
    assert found[0] == "libopenblas0-pthread"  # the name engine/runtime/blas.py's advice gives
    from engine.runtime.blas import _CANDIDATES, ADVICE

    assert found[0] in ADVICE and _listed()[0][1] == list(_CANDIDATES)
