"""Chats resume warm after a restart (issue 33): an engine with a disk tier
saves finished answers' KV; a new engine on the same folder (a restart)
reads a follow-up's prefix back before routing it, says how many tokens it
restored, and answers exactly as the first engine did from its RAM prefix
cache. Real engines on the tiny model, real files; a damaged file is
removed and the answer recomputed, the same."""

from __future__ import annotations

import pytest

from engine import Engine, LaneSpec, Routed, SamplingParams
from engine.models.loader import load_model

LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 12)


def _engine(model_dir, folder) -> Engine:
    engine = Engine(load_model(str(model_dir)), lanes=[LaneSpec("cpu", "cpu", "float32")],
                    kv_cache_dir=str(folder))
    assert engine.wait_ready(120)
    return engine


def _conversation(engine):
    """A first turn, then the follow-up's messages (its prompt starts with the first's)."""
    first = [{"role": "user", "content": LONG}]
    done = engine.generate(first, SamplingParams(max_tokens=16), timeout=60)
    return first + [{"role": "assistant", "content": done.text},
                    {"role": "user", "content": "and then?"}]


def _first_process(model_dir, folder):
    """A first engine on `folder`: a first turn, then its follow-up answered
    from the RAM prefix cache; closed (its writer drained). The follow-up's
    messages and that answer."""
    first = _engine(model_dir, folder)
    try:
        follow = _conversation(first)
        warm = first.generate(follow, SamplingParams(max_tokens=16), timeout=60)
    finally:
        first.close()
    return follow, warm


def test_a_follow_up_after_a_restart_is_restored_from_disk(tiny_model_dir, tmp_path):
    folder = tmp_path / "kv"
    follow, warm = _first_process(tiny_model_dir, folder)
    assert warm.cached_tokens > 100 and warm.restored_tokens == 0  # RAM
    files = [p for p in folder.rglob("*.kv")]
    assert files and all(p.stat().st_mode & 0o077 == 0 for p in files)
    again = _engine(tiny_model_dir, folder)  # a restart
    routed = []
    again.subscribe(lambda e: routed.append(e) if isinstance(e, Routed) else None)
    try:
        done = again.generate(follow, SamplingParams(max_tokens=16), timeout=60)
        assert done.restored_tokens > 100 and done.restore_s is not None
        # The Decisions tab's reason says where the prompt's warmth came from.
        assert any(e.reason.startswith(f"restored {done.restored_tokens:,} tokens from disk")
                   for e in routed if e.request_id == done.request_id)
        # ... and the event carries the restore, which the timeline draws as its own bar.
        assert any((e.restored_tokens, e.restore_s) == (done.restored_tokens, done.restore_s)
                   for e in routed if e.request_id == done.request_id)
        assert done.cached_tokens >= done.restored_tokens
        assert done.text == warm.text  # the answer the RAM cache gave
    finally:
        again.close()


def test_a_damaged_file_is_never_used_and_the_answer_is_the_same(tiny_model_dir, tmp_path):
    folder = tmp_path / "kv"
    follow, warm = _first_process(tiny_model_dir, folder)
    for path in folder.rglob("*.kv"):  # every file damaged
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x55
        path.write_bytes(bytes(data))
    again = _engine(tiny_model_dir, folder)
    try:
        done = again.generate(follow, SamplingParams(max_tokens=16), timeout=60)
        assert done.restored_tokens == 0 and done.text == warm.text
        disk = again.prefix_cache.disk
        assert any("could not be used" in note for note in disk.notes)
    finally:
        again.close()


def test_without_a_folder_nothing_is_written(tiny_model_dir, tmp_path):
    engine = Engine(load_model(str(tiny_model_dir)), lanes=[LaneSpec("cpu", "cpu", "float32")])
    try:
        assert engine.wait_ready(120) and engine.prefix_cache.disk is None
        _conversation(engine)
    finally:
        engine.close()
    assert not list(tmp_path.rglob("*.kv"))


def test_tandem_generate_resumes_warm_in_a_new_process(tiny_model_dir, tmp_path):
    """Two runs of `tandem generate` (each its own process, closing right
    after its answer): the second reads the prompt's KV back from disk and
    answers the same; --no-kv-cache reads nothing."""
    from tests.test_cli import _run

    folder = tmp_path / "kv"
    args = ["-m", "app", "generate", "--model", str(tiny_model_dir), "--temperature", "0",
            "--max-tokens", "8", "--kv-cache-dir", str(folder), LONG]
    rc, first, err = _run(args)
    assert rc == 0, err
    assert "restored" not in err and list(folder.rglob("*.kv"))
    rc, second, err = _run(args)
    assert rc == 0, err
    assert second == first and "tokens from disk in" in err
    rc, _, err = _run(args[:-3] + ["--no-kv-cache", LONG])
    assert rc == 0 and "restored" not in err


def test_tandem_serve_resumes_warm_after_a_restart(tiny_model_dir, tmp_path):
    """Through the API with the openai client: the same conversation after a
    restart has its prefix restored (usage's cached tokens) and the same answer."""
    from tests.test_server import Served

    answers, cached = [], []
    for _ in range(2):
        engine = _engine(tiny_model_dir, tmp_path / "kv")
        served = Served(engine)
        try:
            done = served.client().chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": LONG}], max_tokens=8,
                temperature=0)
            answers.append(done.choices[0].message.content)
            cached.append(done.usage.prompt_tokens_details.cached_tokens)
        finally:
            served.stop()
            engine.close()
    assert answers[0] == answers[1] and cached[0] == 0 and cached[1] > 100


def test_an_unusable_folder_costs_the_warm_restarts_not_the_model(tiny_model_dir, tmp_path,
                                                                  capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    engine = Engine(load_model(str(tiny_model_dir)), lanes=[LaneSpec("cpu", "cpu", "float32")],
                    kv_cache_dir=str(blocker / "kv"))
    try:
        assert engine.wait_ready(120) and engine.prefix_cache.disk is None
        assert engine.generate([{"role": "user", "content": "hi"}],
                               SamplingParams(max_tokens=4), timeout=60).reason in ("stop",
                                                                                  "length")
    finally:
        engine.close()
    assert "KV is not kept on disk" in capsys.readouterr().err


def test_a_request_cancelled_while_its_kv_is_read_ends_cancelled(tiny_model_dir, tmp_path,
                                                                 monkeypatch):
    """The restore phase is paced by an event here: the request is cancelled
    while its files are read, ends cancelled, and the next one is served."""
    import threading

    from engine.runtime.disk_tier import DiskTier

    folder = tmp_path / "kv"
    follow, _ = _first_process(tiny_model_dir, folder)
    reading, release = threading.Event(), threading.Event()
    real = DiskTier.read

    def paced(self, match):
        reading.set()
        release.wait(30)
        return real(self, match)

    monkeypatch.setattr(DiskTier, "read", paced)
    again = _engine(tiny_model_dir, folder)
    try:
        handle = again.submit(follow, SamplingParams(max_tokens=16))
        assert reading.wait(30)
        handle.cancel()
        release.set()
        assert handle.result(30).reason == "cancelled"
        done = again.generate(follow, SamplingParams(max_tokens=4), timeout=60)
        assert done.reason in ("stop", "length") and done.cached_tokens > 100
    finally:
        again.close()


def test_deleting_a_chat_and_clear_saved_kv_remove_the_files(qtbot, tiny_model_dir, db,
                                                             tmp_path):
    """Deleting a chat removes the KV files only it used (the other chat's
    stay); Chat > Clear saved KV removes the model's files, and the status
    bar says how much."""
    from tests.windows import open_window

    folder = tmp_path / "kv"

    def with_disk(source):
        return Engine(load_model(source), lanes=[LaneSpec("cpu", "cpu", "float32")],
                      kv_cache_dir=str(folder))

    window = open_window(qtbot, tiny_model_dir, db, with_disk)
    tab = window.chat_tabs()[0]
    with qtbot.waitSignal(window.bridge.finished, timeout=60_000):
        tab.composer.setPlainText(LONG)
        tab.send()
    disk = window.engine.prefix_cache.disk
    assert disk.close(30) and list(folder.rglob("*.kv"))  # the writer has written
    kept = set(folder.rglob("*.kv"))
    window.new_chat()
    other = window.chat_tabs()[-1]
    with qtbot.waitSignal(window.bridge.finished, timeout=60_000):
        other.composer.setPlainText("A different chat altogether. " * 12)
        other.send()
    assert disk.close(30) and set(folder.rglob("*.kv")) > kept
    window.sidebar.delete(other.chat_id)
    assert disk.close(30) and set(folder.rglob("*.kv")) == kept
    window.menus.clear_kv_action.trigger()
    assert not list(folder.rglob("*.kv")) and disk.nbytes == 0
    assert window.statusBar().currentMessage().startswith("Cleared ")
    window.menus.clear_kv_action.trigger()
    assert window.statusBar().currentMessage() == "No saved KV to clear."
    window.close()


def test_a_lane_that_prefills_sooner_than_the_disk_reads_is_not_kept_waiting(
        tiny_model_dir, tmp_path):
    """Routing knows the tier: where the fastest lane would prefill the
    prefix sooner than the disk gives it back (a fast GPU), it prefills,
    and the Decisions tab says why."""
    folder = tmp_path / "kv"
    follow, _ = _first_process(tiny_model_dir, folder)
    again = _engine(tiny_model_dir, folder)
    routed = []
    again.subscribe(lambda e: routed.append(e) if isinstance(e, Routed) else None)
    try:
        for lane in again.lanes.values():  # a lane as fast as a big GPU, and more
            lane.scheduler.prefill_rate = lambda: 1e9
        done = again.generate(follow, SamplingParams(max_tokens=16), timeout=60)
        assert done.restored_tokens == 0
        assert any(e.reason.startswith("prefilling ") and "beats reading them from disk"
                   in e.reason for e in routed if e.request_id == done.request_id)
    finally:
        again.close()


def _nan_keys(layers):
    import mlx.core as mx

    return [(k * mx.array(float("nan"), k.dtype), v) for k, v in layers]


def _other_shape(layers):
    from tests.test_disk_tier_files import _other_shape

    return _other_shape(layers)


@pytest.mark.parametrize("change", [_other_shape, lambda layers: layers[:1], _nan_keys],
                         ids=["other-heads-and-head-size", "one-layer-of-two", "nan"])
def test_files_that_are_not_this_models_kv_are_never_used(tiny_model_dir, tmp_path, change):
    """Every saved file rewritten well-formed, its checksum recomputed, but
    not this model's KV (1 KV head of 8 for 2 of 16; one layer for two;
    NaN): a restart answers exactly as before from a cold prefill, removes
    the files with a note, and its lane serves on."""
    from tests.test_disk_tier_files import rewrite

    folder = tmp_path / "kv"
    follow, warm = _first_process(tiny_model_dir, folder)
    files = list(folder.rglob("*.kv"))
    for path in files:
        rewrite(path, change)
    again = _engine(tiny_model_dir, folder)
    try:
        for _ in range(2):
            done = again.generate(follow, SamplingParams(max_tokens=16), timeout=60)
            assert done.reason in ("stop", "length") and done.restored_tokens == 0
            assert done.text == warm.text
        assert all(lane.failed is None for lane in again.lanes.values())
        assert any("could not be" in note for note in again.prefix_cache.disk.notes)
    finally:
        again.close()


def test_a_step_that_fails_on_cached_kv_fails_that_request_not_the_lane(tiny_model_dir,
                                                                       tmp_path):
    """Defence behind the file checks: KV in the prefix cache that the model
    cannot use (1 KV head of 8 where it has 2 of 16, as a file that passed
    some other check would give) fails the request that starts from it,
    with the reason; that KV is dropped (RAM and disk), the lane serves on,
    and the same prompt sent again is answered as from a cold start."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    from tests.helpers import prompt_of

    ids = prompt_of(load_model(str(tiny_model_dir)), LONG)
    engine = _engine(tiny_model_dir, tmp_path / "kv")
    try:
        cold = engine.generate(prompt_ids=ids, params=SamplingParams(max_tokens=8), timeout=60)
        disk = engine.prefix_cache.disk
        assert disk.close(30) and disk.match(ids).num_tokens > 100  # saved (good KV)
        engine.prefix_cache.clear()
        bad = []
        for _ in range(2):
            cache = KVCache()
            cache.keys = mx.random.normal((1, 1, len(ids), 8))
            cache.values = mx.random.normal((1, 1, len(ids), 8))
            cache.offset = len(ids)
            bad.append(cache)
        engine.prefix_cache.insert(ids, bad)
        assert engine.prefix_cache.cached_length(ids) > 100
        failed = engine.generate(prompt_ids=ids, params=SamplingParams(max_tokens=8),
                                 timeout=60)
        assert failed.reason == "error" and "cached KV could not be used" in failed.error
        assert all(lane.failed is None for lane in engine.lanes.values())
        # Dropped, in RAM and on disk (the disk's copy was good, but a step
        # failed on that prefix: it is not kept either).
        assert engine.prefix_cache.cached_length(ids) == 0 and disk.match(ids).num_tokens == 0
        again = engine.generate(prompt_ids=ids, params=SamplingParams(max_tokens=8),
                                timeout=60)
        assert again.reason in ("stop", "length") and again.cached_tokens == 0
        assert again.text == cold.text
    finally:
        engine.close()


def test_health_names_a_lane_that_failed(make_engine):
    """/health reports the lanes, not only the process: 200 "ok" while every
    lane serves; after the only lane failed mid-step (its runner raising)
    for good (no restarts left: engine/lane_restart.py; a restart is
    tests/test_lane_restart.py's), 503 "failed" with the lane's reason, the
    server still answering."""
    import httpx

    from tests.test_server import Served

    engine = make_engine()
    served = Served(engine)
    try:
        health = httpx.get(served.url + "/health")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        assert "lanes" not in health.json()
        lane = engine.lanes["cpu"]
        engine.restarts.budget.limit = 0  # restarts used up: it stays failed

        def broken(plan):
            raise RuntimeError("a device fault")

        lane.runner.run = broken
        done = engine.generate([{"role": "user", "content": "hi"}],
                               SamplingParams(max_tokens=4), timeout=60)
        assert done.reason == "error"
        health = httpx.get(served.url + "/health")
        assert health.status_code == 503 and health.json()["status"] == "failed"
        assert "a device fault" in health.json()["lanes"]["cpu"]
    finally:
        served.stop()


def test_fifos_in_the_kv_folder_never_block_the_engine(tiny_model_dir, tmp_path):
    """A FIFO (and a link to one) named like a segment when the engine opens,
    and another planted while it serves: it opens, restores the real files
    and answers as before (before, it never opened: `tandem serve` never
    listened; planted later, every request hung)."""
    import os

    from tests.test_disk_tier_files import _in_time

    folder = tmp_path / "kv"
    follow, warm = _first_process(tiny_model_dir, folder)
    (model_folder,) = [p for p in folder.iterdir() if p.is_dir()]
    os.mkfifo(model_folder / "fifo_0_16.kv")
    os.symlink(model_folder / "fifo_0_16.kv", model_folder / "link_0_16.kv")
    again = _in_time(lambda: _engine(tiny_model_dir, folder), 120)
    try:
        done = _in_time(lambda: again.generate(follow, SamplingParams(max_tokens=16),
                                               timeout=60), 90)
        assert done.restored_tokens > 100 and done.text == warm.text
        os.mkfifo(model_folder / "late_0_16.kv")  # while serving: seen at the next look
        done = _in_time(lambda: again.generate(follow + [{"role": "user", "content": "ok"}],
                                               SamplingParams(max_tokens=4), timeout=60), 90)
        assert done.reason in ("stop", "length")
        assert sum("not a regular file" in n for n in again.prefix_cache.disk.notes) == 3
    finally:
        again.close()
