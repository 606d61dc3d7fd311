"""What hybrid bought, from plain data: real times beside the router's
GPU-only estimates, summed over the requests that used the CPU, with the
predictor's measured error; and in the window, on a real two-lane engine."""

import pytest

from app.scheduler.hybrid_ledger import HybridLedger, note

GPU = {"gpu"}


def _run(ledger, rid, at, actual, predicted, gpu_only, lanes):
    ledger.routed(rid, predicted, {"gpu": gpu_only, "cpu": 99.0} if gpu_only else {}, GPU)
    return ledger.finished(rid, "stop", actual, at, lanes, GPU)


def test_the_sum_counts_requests_that_used_the_cpu_against_their_estimate():
    ledger = HybridLedger(window_s=300)
    _run(ledger, "a", 10, 4.0, 5.0, 9.0, (("prefill", "gpu"), ("decode", "cpu")))  # saved 5
    _run(ledger, "b", 20, 6.0, 6.0, 8.0, (("prefill", "cpu"), ("decode", "cpu")))  # saved 2
    _run(ledger, "c", 30, 3.0, 2.0, 2.5, (("prefill", "gpu"), ("decode", "gpu")))  # GPU only
    cancelled = ledger.finished("d", "cancelled", 1.0, 31, (("prefill", "cpu"),), GPU)
    assert cancelled is None
    s = ledger.summary(now=40)
    assert s.saved_s == pytest.approx(7.0) and s.estimated == 2
    assert (s.used_cpu, s.finished) == (2, 3)
    # Errors |real - predicted| / real: 1/4, 0, 1/3: the median is 1/4.
    assert s.median_error == pytest.approx(0.25)
    text = ledger.describe(now=40)
    assert text.startswith("Hybrid saved ~7 s over the last 5 minutes: 2 of 3 requests went "
                           "to the CPU") and "estimates" in text and "25%" in text
    # Five minutes later only what finished since counts.
    assert ledger.summary(now=325).finished == 1
    # A hybrid slower than the estimate says it cost time.
    late = HybridLedger()
    _run(late, "x", 1, 9.0, 5.0, 6.0, (("prefill", "cpu"),))
    assert late.describe(now=2).startswith("Hybrid cost ~3 s")


def test_when_the_router_left_the_cpu_idle_the_summary_says_why():
    """Hybrid on, nothing sent to the CPU: the summary says why, from the
    router's own decision (Routed.left_idle, engine/core/policies.py), or that the GPU was the
    faster place for each request when nothing was kept out."""
    ledger = HybridLedger()
    ledger.routed("a", 2.0, {"gpu": 2.0}, GPU, at=1)
    ledger.finished("a", "stop", 2.0, 3, (("prefill", "gpu"), ("decode", "gpu")), GPU)
    assert ledger.describe(now=4) == (
        "Over the last 5 minutes, all 1 requests stayed on the GPU: the router predicted "
        "each would finish sooner there than on the CPU.")
    ledger.routed("b", 3.0, {"gpu": 3.0}, GPU,
                  (("cpu", "it would slow GPU more than it adds (contention 0.2)"),), at=5)
    ledger.finished("b", "stop", 3.0, 8, (("prefill", "gpu"), ("decode", "gpu")), GPU)
    assert ledger.describe(now=9) == (
        "Over the last 5 minutes, all 2 requests stayed on the GPU: the router left the CPU "
        "lane idle, since it would slow GPU more than it adds (contention 0.2).")
    # Once the CPU is used again, the summary counts what it bought instead.
    _run(ledger, "c", 20, 4.0, 5.0, 9.0, (("prefill", "gpu"), ("decode", "cpu")))
    assert ledger.describe(now=21).startswith("Hybrid saved ~5 s")


def test_a_request_reads_its_time_beside_the_estimate():
    ledger = HybridLedger()
    outcome = _run(ledger, "a", 10, 4.0, 5.0, 9.0, (("prefill", "cpu"),))
    assert note(outcome, 0.18) == ("finished in 4.0 s; GPU alone (estimate, the router's "
                                   "median error 18%): 9.0 s")
    no_estimate = _run(ledger, "b", 11, 2.0, None, None, (("prefill", "gpu"),))
    assert note(no_estimate, None) == "finished in 2.0 s"
    assert HybridLedger().describe(now=0) == "No answers finished in the last 5 minutes."


def test_the_dock_says_what_hybrid_bought_on_a_real_engine(qtbot, tiny_model_dir, tmp_path):
    from engine import Engine, LaneSpec
    from engine.models.loader import load_model
    from tests.windows import open_window

    def two_lanes(source):  # the cost-aware router (the default), calibrated lanes
        return Engine(load_model(source), lanes=[
            LaneSpec("gpu", "cpu", "float32", acts_as="gpu"), LaneSpec("cpu", "cpu", "float32")],
            mode="hybrid")

    window = open_window(qtbot, tiny_model_dir, tmp_path / "h.db", two_lanes)
    window.engine.wait_ready(60, every_lane=True)
    tabs = [window.chat_tabs()[0], window.new_chat(), window.new_chat()]
    for tab, text in zip(tabs, ["hello world", "café", "numbers 0123456789"]):
        tab.composer.setPlainText(text)
        tab.send()
    qtbot.waitUntil(lambda: not any(t.is_streaming for t in tabs), timeout=60_000)
    dock = window.scheduler
    assert dock.gpu_lanes == {"gpu"} and len(dock.ledger.outcomes) == 3
    for outcome in dock.ledger.outcomes:
        assert outcome.predicted_s is not None and outcome.gpu_only_s is not None
        track = dock.timeline.tracks[outcome.request_id]
        assert track.note.startswith("finished in") and "GPU alone (estimate" in track.note
    done_rows = [r for r in range(dock.log.rowCount()) if dock.log.item(r, 2).text() == "done"]
    assert len(done_rows) == 3
    import time

    assert dock.hybrid_summary.text() == dock.ledger.describe(time.monotonic())
    assert "requests went to the CPU" in dock.hybrid_summary.text() or \
        "stayed on the GPU" in dock.hybrid_summary.text()
    dock.gpu_only.click()
    assert dock.hybrid_summary.text().startswith("GPU-only: every request runs on the GPU")
    window.close()
