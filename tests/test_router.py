"""The router is plain Python: placements from lane snapshots."""

import pytest

from engine.core.router import LaneView, LeastLoadedPolicy, RequestView, eligible_lanes

GPU = LaneView("gpu", "gpu", queue_depth=0, batch_size=0, pending_prompt_tokens=0)
CPU = LaneView("cpu", "cpu", queue_depth=0, batch_size=0, pending_prompt_tokens=0)


def test_modes_restrict_lanes():
    assert eligible_lanes("gpu-only", [GPU, CPU]) == [GPU]
    assert eligible_lanes("cpu-only", [GPU, CPU]) == [CPU]
    assert eligible_lanes("hybrid", [GPU, CPU]) == [GPU, CPU]
    # No GPU on this machine: gpu-only falls back to the lanes that exist.
    assert eligible_lanes("gpu-only", [CPU]) == [CPU]
    with pytest.raises(ValueError):
        eligible_lanes("turbo", [CPU])


def test_least_loaded_prefers_idle_lane_then_gpu():
    policy = LeastLoadedPolicy()
    request = RequestView("r1", prompt_tokens=100, cached_tokens=0)
    assert policy.place(request, [GPU, CPU]).lane == "gpu"
    busy_gpu = LaneView("gpu", "gpu", 2, 4, 900)
    placement = policy.place(request, [busy_gpu, CPU])
    assert placement.lane == "cpu"
    assert "least loaded" in placement.reason and "gpu 906" in placement.reason
    only = policy.place(RequestView("r2", 50, 32), [CPU])
    assert only.lane == "cpu" and "32/50" in only.reason
