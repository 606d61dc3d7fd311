"""Drafts across two real CPU lanes (one acting as the GPU): a request that
drafts moves between lanes mid-answer with its drafting state, and a
cancel mid-stream ends it cleanly while the lane keeps serving."""

from __future__ import annotations

import pytest

from engine import Engine, LaneConfig, LaneSpec, Migrated, SamplingParams
from engine.core.router import Placement
from engine.models.loader import load_model
from tests.helpers import TokenCounter, cheap_widths, prompt_of, reference_greedy
from tests.scripted_model import build_scripted_model

SCRIPT = "Tandem batches chats on the CPU and GPU"


class ThereAndBack:
    """Prefill on "gpu", decode on "cpu", back to "gpu" after 3 tokens."""

    name = "there-and-back"

    def place(self, request, lanes):
        return Placement("gpu", "test: prefill here")

    def place_decode(self, request, current, lanes):
        return Placement("cpu", "test: decode on the other lane")

    def reconsider(self, request, current, lanes):
        if current == "cpu" and request.output_tokens >= 3:
            return Placement("gpu", "test: move back")
        return None


def _two_lanes(source, policy=None) -> Engine:
    config = LaneConfig(drafts="lookup")
    lanes = [LaneSpec("gpu", "cpu", "float32", acts_as="gpu", config=config),
             LaneSpec("cpu", "cpu", "float32", config=config)]
    engine = Engine(load_model(str(source)), lanes=lanes, policy=policy)
    assert engine.wait_ready(120, every_lane=True)
    cheap_widths(engine)
    for lane in engine.lanes.values():
        lane.reconsider_every = 1
    return engine


@pytest.fixture(scope="module")
def copier(tmp_path_factory):
    return build_scripted_model(tmp_path_factory.mktemp("copier"), SCRIPT)


def test_a_drafting_request_moves_between_lanes_and_writes_the_same(copier):
    engine = _two_lanes(copier, ThereAndBack())
    moves = []
    engine.subscribe(lambda e: moves.append((e.from_lane, e.to_lane))
                     if isinstance(e, Migrated) else None)
    try:
        handle = engine.submit([{"role": "user", "content": f"Copy: {SCRIPT}"}],
                               SamplingParams(max_tokens=40, draft_tokens=2))
        done = handle.result(120)
        assert done.text == SCRIPT and done.reason == "stop"
        assert done.lanes[:3] == (("prefill", "gpu"), ("decode", "cpu"), ("decode", "gpu"))
        assert moves[:2] == [("gpu", "cpu"), ("cpu", "gpu")]
        # Drafts were verified on both decode lanes (two at most a step, so
        # that some are left for the second), counted once each.
        stats = {name: lane.stats for name, lane in engine.lanes.items()}
        assert stats["cpu"].accepted_drafts > 0 and stats["gpu"].accepted_drafts > 0
        assert done.accepted_drafts == stats["cpu"].accepted_drafts + \
            stats["gpu"].accepted_drafts
        assert done.output_tokens == len(handle.request.output_ids)
    finally:
        engine.close()


def test_cancel_mid_stream_with_drafts_on(tiny_model_dir, tiny_loaded):
    """A repetitive prompt gives lookup something to propose at every step;
    cancelled after a few tokens, the request ends cancelled, its partner
    in the batch is untouched, and the lane serves the next one."""
    engine = _two_lanes(tiny_model_dir)
    counter = TokenCounter(engine)
    try:
        text = "one two one two one two one two one two"
        victim = engine.submit(prompt_ids=prompt_of(tiny_loaded, text),
                               params=SamplingParams(max_tokens=400))
        partner_ids = prompt_of(tiny_loaded, "a b a b a b a b a b")
        partner = engine.submit(prompt_ids=partner_ids, params=SamplingParams(max_tokens=30))
        counter.wait_for(victim.request_id, 3)
        victim.cancel()
        assert victim.result(60).reason == "cancelled"
        partner.result(60)
        assert partner.request.output_ids == reference_greedy(tiny_loaded, partner_ids, 30)
        after = engine.generate(prompt_ids=partner_ids, params=SamplingParams(max_tokens=30),
                                timeout=60)
        assert after.reason in ("stop", "length")
    finally:
        engine.close()


class StayOnGpu:
    name = "stay"

    def place(self, request, lanes):
        return Placement("gpu", "test")

    def place_decode(self, request, current, lanes):
        return Placement("gpu", "test")

    def reconsider(self, request, current, lanes):
        return None


@pytest.mark.parametrize("mode", ["hybrid", "gpu-only"])
def test_the_draft_model_runs_where_the_placement_says(tiny_model_dir, tiny_loaded, mode):
    """In hybrid mode the verifying lane measures drafting on each lane's
    device and drafts where that is least (two CPU lanes here: both are
    measured, the answer is the same); in gpu-only mode only on its own."""
    config = LaneConfig(drafts="model")
    lanes = [LaneSpec("gpu", "cpu", "float32", acts_as="gpu", config=config),
             LaneSpec("cpu", "cpu", "float32", config=config)]
    engine = Engine(load_model(str(tiny_model_dir)), lanes=lanes, policy=StayOnGpu(),
                    mode=mode, draft=load_model(str(tiny_model_dir)))
    try:
        assert engine.wait_ready(120, every_lane=True)
        cheap_widths(engine)
        ids = prompt_of(tiny_loaded, "the quick brown fox jumps")
        handle = engine.submit(prompt_ids=ids, params=SamplingParams(max_tokens=40,
                                                                     draft_tokens=2))
        done = handle.result(60)
        assert handle.request.output_ids == reference_greedy(tiny_loaded, ids, 40)
        assert done.accepted_drafts > 0
        measured = set(engine.lanes["gpu"].draft_site.placement.seconds)
        assert measured == ({"gpu", "cpu"} if mode == "hybrid" else {"gpu"})
        assert engine.lanes["gpu"].draft_site.placement.reason
    finally:
        engine.close()
