"""The kernels' thread pool shares the machine (issue 51): its helpers run
at the niceness of the lane whose job they run, so a CPU lane niced for the
GUI's sake does not get a helper that competes with the GUI at 0 (a helper is
started by the first job, often the load-time probe on the GUI's thread)."""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
import pytest

import mlx.core as mx

from engine.core import priority
from engine.runtime import qmm
from tests.test_qmm_kernels import EXT, weights

pytestmark = [
    pytest.mark.skipif(EXT is None, reason=f"kernels not built: {qmm.status()[1]}"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice: Linux")]


def helpers() -> dict[int, int]:
    """The pool's helper threads: thread id -> niceness."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() != "tandem-pool":
                    continue
            out[int(tid)] = os.getpriority(os.PRIO_PROCESS, int(tid))
        except OSError:  # the thread ended meanwhile
            continue
    return out


def test_a_helper_takes_the_niceness_of_the_lane_whose_job_it_runs():
    rng = np.random.default_rng(0)
    w, s, b = weights(rng, 512, 4096, 64, 4, mx.float16)  # 2 M multiply-adds a row: pooled
    x = mx.array(rng.standard_normal((4, 4096)).astype(np.float32))
    threads = EXT.threads()
    EXT.set_threads(2)
    try:
        with mx.stream(mx.cpu):  # a job from this thread (nice as the test runner)
            mx.eval(EXT.quantized_matmul(x, w, s, b, 64, 4))
        start = helpers()
        assert start, "the job ran no helper"
        wanted = max(start.values()) + 3
        done = []

        def lane():  # a lane's thread: niced first, then its own stream and jobs
            priority.lower_thread(wanted)
            stream = mx.new_stream(mx.cpu)
            with mx.stream(stream):
                y = EXT.quantized_matmul(x, w, s, b, 64, 4)
                mx.eval(y)
            done.append(y)

        worker = threading.Thread(target=lane)
        worker.start()
        worker.join(60)
        assert done and not worker.is_alive()
        after = helpers()
        # Every helper that ran the lane's job now runs at least at its nice.
        assert any(nice >= wanted for nice in after.values()), (start, after, wanted)
    finally:
        EXT.set_threads(threads)
