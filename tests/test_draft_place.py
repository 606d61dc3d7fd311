"""Where a draft model runs (engine/core/draft_place.py): plain Python over
measured seconds per drafted token, as a verifying lane sees them."""

from engine.core.draft_place import DraftPlacement


def test_each_lane_is_measured_then_the_faster_drafts():
    place = DraftPlacement("gpu", retry_every=8)
    assert place.choose(["gpu", "cpu"]) == "gpu" and "not measured" in place.reason
    place.observe("gpu", 0.010)
    assert place.choose(["gpu", "cpu"]) == "cpu"
    place.observe("cpu", 0.004)
    assert place.choose(["gpu", "cpu"]) == "cpu"
    assert place.reason.startswith("CPU: 4.0 ms") and "GPU 10.0" in place.reason
    # The CPU lane gets busy: its drafts slow down, and the GPU drafts again.
    for _ in range(10):
        place.observe("cpu", 0.030)
    picks = []
    for _ in range(20):
        lane = place.choose(["gpu", "cpu"])
        picks.append(lane)
        place.observe(lane, 0.010 if lane == "gpu" else 0.030)
    assert picks.count("gpu") > 15 and "cpu" in picks  # re-measured now and then


def test_one_candidate_is_the_lane_itself():
    """gpu-only mode: the verifying lane's own device only, whatever was measured."""
    place = DraftPlacement("gpu")
    place.observe("cpu", 0.001)
    place.observe("gpu", 0.010)
    assert all(place.choose(["gpu"]) == "gpu" for _ in range(100))
