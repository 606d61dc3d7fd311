"""Build Tandem's quantized matmul kernels (native/tandem_kernels, an MLX
extension) into engine/runtime/, against the MLX installed in this venv.

Run by `make kernels` (which `make run` and `make test` depend on). It never
fails the install: whatever goes wrong (no compiler, no Python headers, a
build error), it says so in one line, writes the reason to
engine/runtime/_tandem_kernels.status and exits 0; Tandem then runs MLX's
own quantized matmul and says so (engine/runtime/qmm.py).

    .venv/bin/python tools/build_kernels.py [--force]
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "native" / "tandem_kernels"
BUILD = ROOT / "build" / "kernels"
TARGET = ROOT / "engine" / "runtime"
STATUS = TARGET / "_tandem_kernels.status"
TOOLS = ("cmake>=3.27,<5", "ninja", "nanobind==3.1.0")  # nanobind: MLX 0.32's ABI


def source_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted(SOURCE.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(SOURCE).as_posix().encode())
            digest.update(path.read_bytes())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()[:16]


def built_module() -> Path | None:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    path = TARGET / f"_tandem_kernels{suffix}"
    return path if path.exists() else None


def say(status: str, line: str) -> int:
    STATUS.write_text(status + "\n", encoding="utf-8")
    print(f"tandem kernels: {line}", flush=True)
    return 0


def run(cmd: list[str], log) -> None:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def main(argv: list[str]) -> int:
    import mlx.core as mx

    stamp = f"built mlx {mx.__version__} sources {source_hash()}"
    if "--force" not in argv and built_module() and STATUS.exists() \
            and STATUS.read_text(encoding="utf-8").strip() == stamp:
        print("tandem kernels: up to date", flush=True)
        return 0
    compiler = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++") \
        or shutil.which("clang++")
    if compiler is None:
        return say("not built: no C++ compiler", "not built (no C++ compiler: apt install g++); "
                   "MLX's own quantized matmul is used")
    include = sysconfig.get_paths().get("include", "")
    if not (Path(include) / "Python.h").exists():
        return say("not built: no Python headers", "not built (no Python headers: apt install "
                   "python3.11-dev); MLX's own quantized matmul is used")
    BUILD.mkdir(parents=True, exist_ok=True)
    log_path = BUILD / "build.log"
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            run([sys.executable, "-m", "pip", "install", "--quiet", *TOOLS], log)
            bin_dir = Path(sys.executable).parent
            cmake = str(bin_dir / "cmake") if (bin_dir / "cmake").exists() else "cmake"
            generator = ["-G", "Ninja"] if (bin_dir / "ninja").exists() else []
            run([cmake, "-S", str(SOURCE), "-B", str(BUILD), *generator,
                 f"-DPython_EXECUTABLE={sys.executable}", f"-DCMAKE_CXX_COMPILER={compiler}",
                 "-DCMAKE_BUILD_TYPE=Release"], log)
            run([cmake, "--build", str(BUILD), "-j", str(os.cpu_count() or 2)], log)
        except (subprocess.CalledProcessError, OSError) as e:
            return say(f"not built: the build failed ({e}); see {log_path}",
                       f"not built (see {log_path}); MLX's own quantized matmul is used")
    built = sorted(BUILD.glob("_tandem_kernels*.so")) + sorted(BUILD.glob("_tandem_kernels*.pyd"))
    if not built:
        return say(f"not built: no module came out; see {log_path}",
                   f"not built (see {log_path}); MLX's own quantized matmul is used")
    # A new file renamed over the old one: a running Tandem keeps the module
    # it mapped (copying into it in place killed such a process with SIGBUS).
    staged = TARGET / (built[0].name + ".new")
    shutil.copy2(built[0], staged)
    os.replace(staged, TARGET / built[0].name)
    return say(stamp, f"built ({built[0].name})")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except Exception as e:  # never fail the install
        say(f"not built: {type(e).__name__}: {e}", f"not built ({e}); MLX's own quantized "
            "matmul is used")
    sys.exit(0)
