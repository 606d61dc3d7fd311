"""The disk tier (engine/runtime/disk_tier.py) facing files it did not write:
a FIFO, a symlink or a folder named like a segment is skipped, never
opened, even when planted while serving; a well-formed, checksummed file
of another model's shape, or with values no model writes (NaN, inf, a
layer of zeros), is refused before MLX sees it and removed, the match
ending before it. The tier's own behaviour: tests/test_disk_tier.py."""

from __future__ import annotations

import pytest

import mlx.core as mx

from engine.runtime import kv_file
from engine.runtime.disk_tier import DiskTier
from tests.test_disk_tier import BLOCK, LAYOUT, LONG, MODEL, kv_of


def _in_time(work, seconds: float = 30.0):
    """`work()`'s result, run on a thread: a call that blocks for good (a
    FIFO opened for reading) fails the test instead of hanging it."""
    import threading

    out: list = []
    thread = threading.Thread(target=lambda: out.append(work()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked: a non-regular file was opened"
    return out[0]


def test_entries_that_are_not_regular_files_are_skipped_never_opened(tiny_loaded, tmp_path):
    """A FIFO, a symlink (to a FIFO or to a real segment) or a folder named
    like a segment or a temporary file: the tier opens, skips each with one
    note, keeps its real segments; one planted while serving (seen at the
    next look, or swapped in for a segment it will read) never blocks a read."""
    import os
    import time

    tokens, layers = kv_of(tiny_loaded, LONG)
    tier = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT, segment_tokens=48)
    tier.save(tokens, layers)
    assert tier.close(30)
    folder = tier.folder
    real = sorted(folder.glob("*.kv"))
    os.mkfifo(folder / "fifo_0_16.kv")
    os.symlink(folder / "fifo_0_16.kv", folder / "link_0_16.kv")
    os.symlink(real[0], folder / "copy_0_16.kv")
    (folder / "folder_0_16.kv").mkdir()
    (folder / ".kv-old.tmp").mkdir()
    os.utime(folder / ".kv-old.tmp", (time.time() - 7200, time.time() - 7200))
    again = _in_time(lambda: DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT,
                                      segment_tokens=48))
    end = len(tokens) - len(tokens) % BLOCK
    assert again.match(tokens).num_tokens == end  # the tier is on, its segments found
    skipped = [n for n in again.notes if "not a regular file" in n]
    assert len(skipped) == 5 and len(again.notes) == 5, again.notes
    for name in ("fifo_0_16.kv", "link_0_16.kv", "copy_0_16.kv", "folder_0_16.kv",
                 ".kv-old.tmp"):
        assert os.path.lexists(folder / name)  # not ours: left alone
    assert again.read(again.match(tokens))[0] == end
    # Planted while serving: the next look skips it, once.
    os.mkfifo(folder / "late_0_16.kv")
    _in_time(again.refresh)
    _in_time(again.refresh)
    assert len([n for n in again.notes if "late_0_16.kv" in n]) == 1
    # A segment swapped for a FIFO after the tier looked: the read ends before it.
    second = again.match(tokens).segments[1][0]
    second.path.unlink()
    os.mkfifo(second.path)
    read, back = _in_time(lambda: again.read(again.match(tokens)))
    assert read == second.start and back[0][0].shape[2] == read
    assert os.path.lexists(second.path) and "not a regular file" in again.notes[-1]


def rewrite(path, change) -> None:
    """The segment at `path` with its arrays replaced by `change(layers)`,
    written as a well-formed file of the same positions and tokens, its
    checksum recomputed: only the model's own checks can refuse it."""
    data = path.read_bytes()
    (size,) = __import__("struct").unpack("<I", data[8:12])
    header = __import__("json").loads(data[12:12 + size])
    layers = kv_file.decode(data, header["model"], header["start"], header["blocks"])
    path.write_bytes(kv_file.encode(header["model"], header["start"], header["block"],
                                    header["blocks"], change(layers), header["parent"]))


def _other_shape(layers):
    return [(mx.random.normal((1, 1, k.shape[2], 8)), mx.random.normal((1, 1, k.shape[2], 8)))
            for k, _ in layers]


@pytest.mark.parametrize("change,why", [
    (_other_shape, "arrays of shape [1, 1,"),
    (lambda layers: layers[:1], "KV of 1 layers; the model has 2"),
    (lambda layers: layers + layers[:1], "KV of 3 layers; the model has 2"),
])
def test_a_file_of_another_models_shape_is_removed_when_found_and_when_read(
        tiny_loaded, tmp_path, change, why):
    """Well-formed, checksummed files whose arrays are not this model's KV
    (other KV heads or head size, a layer missing or one too many): the
    scan removes them with a note; one swapped in after the scan is refused
    by `read` before MLX sees it, removed, and the match ends before it."""
    tokens, layers = kv_of(tiny_loaded, LONG)
    tier = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT, segment_tokens=48)
    tier.save(tokens, layers)
    assert tier.close(30)
    first, *rest = sorted(tier.match(tokens).segments, key=lambda s: s[0].start)
    rewrite(first[0].path, change)
    again = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT, segment_tokens=48)
    assert not first[0].path.exists() and again.match(tokens).num_tokens == 0
    assert any("could not be read" in n for n in again.notes)
    # Swapped in after the tier looked: refused when read.
    second = rest[0][0]
    rewrite(second.path, change)
    read, back = again.read(tier.match(tokens))
    assert read == 0 and back == []  # (the first is gone: nothing before it to use)
    third = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT, segment_tokens=48)
    tier = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT, segment_tokens=48)
    tier.save(tokens, layers)  # written again whole
    assert tier.close(30)
    third.refresh()
    match = third.match(tokens)
    rewrite(match.segments[1][0].path, change)
    read, back = third.read(match)
    assert read == match.segments[0][1] and back[0][0].shape == (1, 2, read, 16)
    assert why in third.notes[-1] and not match.segments[1][0].path.exists()


@pytest.mark.parametrize("value,why", [(float("nan"), "not finite"), (float("inf"), "not finite"),
                                       (0.0, "nothing but zeros")])
@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
def test_values_no_model_writes_are_refused_before_mlx_sees_them(tiny_loaded, tmp_path,
                                                                 value, why, dtype):
    """NaN, inf, or a layer's values all zeros, in a checksummed file of the
    right shape: `read` refuses it, removes it and ends the match before it."""
    tokens, layers = kv_of(tiny_loaded, LONG)
    layers = [(k.astype(dtype), v.astype(dtype)) for k, v in layers]
    mx.eval(layers)  # save takes evaluated KV
    tier = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT, segment_tokens=48)
    tier.save(tokens, layers)
    assert tier.close(30)
    match = tier.match(tokens)
    assert len(match.segments) > 1, tier.notes
    second = match.segments[1][0]

    def spoil(layers):
        keys, values = layers[1]
        if value == 0.0:
            return [layers[0], (keys, mx.zeros_like(values))]
        spoilt = mx.where(mx.arange(keys.shape[2])[:, None] == 3, mx.array(value, keys.dtype),
                          keys)
        return [layers[0], (spoilt, values)]

    rewrite(second.path, spoil)
    again = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT, segment_tokens=48)
    read, back = again.read(again.match(tokens))
    assert read == match.segments[0][1] and back[0][0].shape[2] == read
    assert why in again.notes[-1] and not second.path.exists()


def test_files_gone_between_the_listing_and_the_look_are_no_news(tiny_loaded, tmp_path,
                                                                 monkeypatch):
    """A temporary file renamed (the tier's own write finishing) or a segment
    evicted by another process after the folder was listed: no note, no
    "not a regular file" (a full run's tier said so of its own temporary)."""
    from pathlib import Path

    tokens, layers = kv_of(tiny_loaded, LONG)
    tier = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT, segment_tokens=48)
    tier.save(tokens, layers)
    assert tier.close(30)
    folder = tier.folder
    listed = list(folder.iterdir()) + [folder / ".kv-gone.tmp", folder / "gone_0_16.kv"]
    real_iterdir = Path.iterdir
    monkeypatch.setattr(Path, "iterdir",
                        lambda self: iter(listed) if self == folder else real_iterdir(self))
    again = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT, segment_tokens=48)
    assert again.notes == []
    assert again.match(tokens).num_tokens == len(tokens) - len(tokens) % BLOCK
