"""A long prompt's prefill acts on Stop within about a second (issue 21,
part 1 #6): a prefill step while nothing decodes is sized to last about
`LaneConfig.prefill_step_s` at the lane's prefill rate (its cost model's, or
what it measured: at warm-up, then from its own steps), and the lane's
samples count a running step as busy and say how much prompt is left."""

import threading

from engine import LaneConfig, LaneSpec, SamplingParams
from engine.core.events import LaneSample
from engine.runtime.runner import ModelRunner


def _long_prompt(loaded, n=460):
    ids = loaded.tokenizer.encode("the quick brown fox jumps over the lazy dog " * 60)
    return ids[:n]


def _chunks(monkeypatch):
    sizes = []
    real = ModelRunner.run

    def run(self, plan):
        sizes.extend(chunk.size for chunk in plan.prefill)
        return real(self, plan)

    monkeypatch.setattr(ModelRunner, "run", run)
    return sizes


def test_prefill_steps_last_about_prefill_step_s(make_engine, tiny_loaded, monkeypatch):
    engine = make_engine()
    scheduler = engine.lanes["cpu"].scheduler
    assert scheduler.measured_prefill_tps  # measured at warm-up
    scheduler.measured_prefill_tps = 150.0  # as if this lane prefilled 150 tokens/s
    sizes = _chunks(monkeypatch)
    prompt = _long_prompt(tiny_loaded)
    done = engine.generate(prompt_ids=prompt, params=SamplingParams(max_tokens=2), timeout=60)
    assert done.reason in ("length", "stop")
    # The first step: ~1 s at 150 tokens/s; the lane then learns its real
    # (here much faster) rate from that step and sizes the next by it.
    assert sizes[0] == 150 and sum(sizes) == len(prompt) and len(sizes) >= 2
    assert scheduler.measured_prefill_tps > 150.0


def test_without_the_bound_a_prompt_is_one_chunk(make_engine, tiny_loaded, monkeypatch):
    engine = make_engine([LaneSpec("cpu", "cpu", "float32", LaneConfig(prefill_step_s=0))])
    engine.lanes["cpu"].scheduler.measured_prefill_tps = 150.0
    sizes = _chunks(monkeypatch)
    prompt = _long_prompt(tiny_loaded)
    engine.generate(prompt_ids=prompt, params=SamplingParams(max_tokens=2), timeout=60)
    assert sizes == [len(prompt)]


def test_a_running_step_counts_as_busy_and_prefill_left_is_shown(make_engine, tiny_loaded):
    engine = make_engine([LaneSpec("cpu", "cpu", "float32",
                                   LaneConfig(min_step_s=3.0, prefill_step_s=0.5))])
    lane = engine.lanes["cpu"]
    lane.scheduler.measured_prefill_tps = 100.0  # 128-token steps: several for the prompt
    seen = threading.Event()
    samples = []

    def on_event(event):
        if isinstance(event, LaneSample) and event.lane == "cpu" and lane.stats.steps == 0:
            samples.append(event)
            if event.busy_fraction > 0.5 and event.prefill_left > 0:
                seen.set()

    engine.subscribe(on_event)
    handle = engine.submit(prompt_ids=_long_prompt(tiny_loaded),
                           params=SamplingParams(max_tokens=2))
    assert seen.wait(30), samples[-3:]  # during the first (paced, 3 s) step
    handle.cancel()
    assert handle.result(30).reason == "cancelled"
