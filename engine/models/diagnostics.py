"""What MLX runs on here: versions and a GPU kernel check, for self-tests,
the default lanes and the test suite.

On macOS a machine may report a Metal GPU on which kernels cannot run (a
hosted CI runner's virtual GPU): `gpu_usable()` runs a few kernels once per
process and, where they fail, makes the CPU MLX's default device and says
why, so the engine, the suite and the self-test run on the CPU and say so.
A bundle whose Metal shader library is missing is a different failure
(`metallib_problem`): a broken build, which the self-test reports as one."""

from __future__ import annotations

import sys
from pathlib import Path

import mlx.core as mx

_usable: tuple[bool, str] | None = None


def mlx_version() -> str:
    return mx.__version__


def _run_kernels() -> None:
    with mx.stream(mx.gpu):
        a = mx.random.normal((64, 64))
        mx.eval(mx.softmax(a @ a.T, axis=-1).sum())


def gpu_usable() -> tuple[bool, str]:
    """(True, "") where MLX has a GPU that runs kernels; else (False, why).
    Metal (macOS) is checked by running kernels, once per process; a CUDA
    GPU is taken as reported (its kernels compile on the lane's own thread,
    tens of seconds on a fresh machine: DESIGN.md, "GPU backends")."""
    global _usable
    if _usable is None:
        _usable = _check()
        if not _usable[0] and _usable[1] != "none" and mx.default_device() == mx.gpu:
            mx.set_default_device(mx.cpu)  # nothing else should touch that GPU
            print(f"tandem: {_usable[1]}: running on the CPU.", file=sys.stderr)
    return _usable


def _check() -> tuple[bool, str]:
    try:
        if not mx.is_available(mx.gpu):
            return False, "none"
    except Exception as e:
        return False, f"MLX cannot tell whether there is a GPU: {e}"
    if sys.platform != "darwin":
        return True, ""
    try:
        _run_kernels()
    except Exception as e:
        return False, f"MLX reports a GPU but cannot run kernels on it ({e})"
    return True, ""


def gpu_check() -> str:
    """'none' without a GPU, 'ok' when a few kernels ran on it, else
    'unusable: <why>' (everything then runs on the CPU)."""
    usable, why = gpu_usable()
    if usable:
        try:
            _run_kernels()
        except Exception as e:
            return f"unusable: MLX reports a GPU but cannot run kernels on it ({e})"
        return "ok"
    return "none" if why == "none" else f"unusable: {why}"


def metallib_problem() -> str | None:
    """In a frozen macOS bundle: why MLX's Metal shader library is not where
    MLX looks for it (beside each libmlx.dylib), or None; None elsewhere.
    packaging/README.md, "macOS"."""
    if sys.platform != "darwin" or not getattr(sys, "frozen", False):
        return None
    root = Path(getattr(sys, "_MEIPASS", Path(sys.executable).parent))
    dylibs = list(root.rglob("libmlx.dylib"))
    if not dylibs:
        return f"no libmlx.dylib in the bundle ({root})"
    missing = [str(d.parent) for d in dylibs if not (d.parent / "mlx.metallib").exists()]
    return f"mlx.metallib missing beside libmlx.dylib in {', '.join(missing)}" if missing else None
