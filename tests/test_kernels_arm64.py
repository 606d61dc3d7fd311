"""Tandem's arm64 kernels (native/tandem_kernels/src/kernels_neon.cpp) on this
machine: tests/driver.cpp cross-compiled with Debian's aarch64 toolchain
(static, no MLX: the extension links the host's libmlx.so) and run under
qemu-user. The driver holds the NEON products and dequantized panels to the
float64 reference within the int16 rounding bound, the portable kernels and
the attention kernel alike, and drives the pool from two threads. What runs
here is NEON's arithmetic, not its speed (an emulator); the macOS job runs
the same code natively. Skipped, with the reason, where the cross compiler
or qemu-aarch64 is missing (.ci/run installs both)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "native" / "tandem_kernels"
CXX = shutil.which("aarch64-linux-gnu-g++")
QEMU = shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")
SOURCES = ("src/kernels_generic.cpp", "src/attention_generic.cpp", "src/elementwise_generic.cpp",
           "src/pool.cpp",
           "src/kernels_neon.cpp", "tests/driver.cpp")

pytestmark = [
    pytest.mark.skipif(CXX is None, reason="no aarch64 cross compiler "
                                           "(apt install g++-aarch64-linux-gnu)"),
    pytest.mark.skipif(QEMU is None, reason="no qemu-aarch64 (apt install qemu-user)")]


def test_neon_kernels_under_qemu(tmp_path):
    exe = tmp_path / "driver-arm64"
    subprocess.run([CXX, "-std=c++20", "-O2", "-static", "-DTK_ARM64=1",
                    *(str(ROOT / s) for s in SOURCES), "-o", str(exe), "-pthread"],
                   check=True, capture_output=True, text=True, timeout=600)
    done = subprocess.run([QEMU, str(exe)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ok: 90 cases, 2 kernels (neon) and 1 packed"), done.stdout
