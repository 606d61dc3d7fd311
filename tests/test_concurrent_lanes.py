"""Two lanes' threads against each other (issue 34): MLX does not promise
that threads may share it freely (engine/README.md, "Threads"), so Tandem
gives each lane its own thread and stream and keeps every other thread's
MLX work on the CPU's stream. This runs a GPU lane (a real one where MLX has
a usable GPU, else a CPU lane in its role) and a CPU lane at once, with the
disk tier's writer saving behind them, over waves of concurrent chats whose
follow-ups move between lanes; every answer must equal the one a lone
single-lane engine gives. Paced by the requests' own results, not by time."""

from __future__ import annotations

from engine import Engine, LaneSpec, SamplingParams, gpu_available
from engine.models.loader import load_model

CHATS = 6
WAVES = 3
PARAMS = SamplingParams(max_tokens=12, temperature=0.0)


def _gpu_lane() -> LaneSpec:
    if gpu_available():
        return LaneSpec("gpu", "gpu", "float32")
    return LaneSpec("gpu", "cpu", "float32", acts_as="gpu")


def _waves(engine: Engine) -> dict:
    """WAVES rounds of CHATS chats at once, each round following up the
    last: {(chat, wave): text}."""
    chats = {c: [{"role": "user", "content": f"Tell me about place number {c}."}]
             for c in range(CHATS)}
    out = {}
    for wave in range(WAVES):
        handles = {c: engine.submit(list(messages), PARAMS, tab_id=str(c))
                   for c, messages in chats.items()}
        for c, handle in handles.items():
            done = handle.result(timeout=300)
            assert done.reason in ("stop", "length"), done.error
            out[(c, wave)] = done.text
            chats[c] += [{"role": "assistant", "content": done.text},
                         {"role": "user", "content": f"And then, part {wave + 1}?"}]
    return out


def test_two_lanes_threads_against_each_other(tiny_model_dir, tmp_path):
    alone = Engine(load_model(str(tiny_model_dir)), lanes=[LaneSpec("cpu", "cpu", "float32")])
    try:
        assert alone.wait_ready(120)
        reference = _waves(alone)
    finally:
        alone.close()
    both = Engine(load_model(str(tiny_model_dir)),
                  lanes=[_gpu_lane(), LaneSpec("cpu", "cpu", "float32")], mode="hybrid",
                  kv_cache_dir=str(tmp_path / "kv"))
    try:
        assert both.wait_ready(120, every_lane=True)
        lanes_used = set()
        both.subscribe(lambda e: lanes_used.add(getattr(e, "lane", None)))
        assert _waves(both) == reference
        assert {"gpu", "cpu"} <= lanes_used  # both threads ran MLX work
        assert all(lane.failed is None for lane in both.lane_info())
        disk = both.prefix_cache.disk
        assert disk.close(60) and disk.nbytes > 0 and not disk.notes
    finally:
        both.close()
