"""Tandem's kernels and their thread pool (native/tandem_kernels) under
AddressSanitizer + UndefinedBehaviorSanitizer and under ThreadSanitizer:
tests/driver.cpp, no MLX or Python, built here the way the extension builds
them (the AVX2 file alone with its flags) and run. Skipped, with the reason,
where there is no C++ compiler or the CPU is not x86."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "native" / "tandem_kernels"
CXX = shutil.which("g++") or shutil.which("clang++")
X86 = platform.machine().lower() in ("x86_64", "amd64")

pytestmark = [pytest.mark.skipif(CXX is None, reason="no C++ compiler (apt install g++)"),
              pytest.mark.skipif(not X86, reason="the driver is built for x86 here")]


def build_and_run(tmp_path: Path, sanitize: str) -> str:
    flags = ["-std=c++20", "-O1", "-g", f"-fsanitize={sanitize}", "-fno-sanitize-recover=all",
             "-DTK_X86=1"]
    objects = []
    avx2 = ["-mavx2", "-mfma", "-mf16c"]
    vnni = avx2 + ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni"]
    for source, extra in (("src/kernels_generic.cpp", []), ("src/attention_generic.cpp", []),
                          ("src/elementwise_generic.cpp", []),
                          ("src/pool.cpp", []), ("tests/driver.cpp", []),
                          ("src/kernels_avx2.cpp", avx2), ("src/attention_avx2.cpp", avx2),
                          ("src/elementwise_avx2.cpp", avx2), ("src/kernels_vnni.cpp", vnni)):
        obj = tmp_path / (Path(source).stem + ".o")
        subprocess.run([CXX, *flags, *extra, "-c", str(ROOT / source), "-o", str(obj)],
                       check=True, capture_output=True, text=True, timeout=300)
        objects.append(str(obj))
    exe = tmp_path / "driver"
    subprocess.run([CXX, *flags, *objects, "-o", str(exe), "-pthread"], check=True,
                   capture_output=True, text=True, timeout=300)
    done = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING: ThreadSanitizer" not in done.stderr, done.stderr
    return done.stdout


def test_kernels_and_pool_under_address_and_undefined_sanitizers(tmp_path):
    out = build_and_run(tmp_path, "address,undefined")
    # 30 cases a kernel: generic and avx2, and avx512vnni with int16 and with
    # int8 activations where the CPU has it; each on MLX's layout and packed.
    vnni = ", avx512vnni-int8" in out
    assert out.startswith(f"ok: {240 if vnni else 120} cases"), out  # 8 or 4 kernels x 30
    assert "dequantized panels, quantized activations, attention, swiglu" in out, out


def test_the_pool_under_thread_sanitizer(tmp_path):
    assert "400 pooled runs from two threads" in build_and_run(tmp_path, "thread")
