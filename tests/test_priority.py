"""The engine's threads yield the cores to the GUI thread (Linux)."""

import os
import sys
import threading

import pytest

from engine import SamplingParams
from engine.core import priority
from engine.runtime import blas

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="thread niceness is a Linux feature")


def test_worker_nice_lowers_engine_threads_but_not_the_caller(make_engine, tiny_loaded):
    caller = priority.niceness()
    engine = make_engine(worker_nice=caller + 3)
    handle = engine.submit(prompt_ids=tiny_loaded.tokenizer.encode("hello"),
                           params=SamplingParams(max_tokens=4))
    assert handle.result(timeout=60).output_tokens == 4  # it still generates
    lane = next(iter(engine.lanes.values()))
    assert priority.niceness(lane.thread_id) == caller + 3
    assert priority.niceness(engine._life.sampler.native_id) == caller + 3
    if blas.loaded_blas and os.cpu_count() > 1:
        assert blas.blas_thread_ids, "OpenBLAS's worker threads were not recorded"
    for tid in blas.blas_thread_ids:
        assert priority.niceness(tid) >= caller + 3
    assert priority.niceness() == caller
    assert priority.niceness(threading.main_thread().native_id) == caller


def test_default_engine_threads_keep_the_callers_priority(make_engine):
    caller = priority.niceness()
    engine = make_engine()
    lane = next(iter(engine.lanes.values()))
    assert priority.niceness(lane.thread_id) == caller
