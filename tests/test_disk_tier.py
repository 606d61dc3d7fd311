"""The disk tier (issue 33, engine/runtime/disk_tier.py) on its own: real KV
of the tiny model saved in segments by the background writer, found again
by a new tier on the same folder (a restart) and read back bit for bit; a
damaged file removed and the match cut before it; the byte budget; a full
disk a note. Engine integration comes in a later step of the issue."""

from __future__ import annotations

import errno

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from engine.runtime import kv_file
from engine.runtime.disk_tier import DiskTier, chain_hashes
from engine.runtime.kv_file import KVLayout, layout_of
from tests.helpers import prompt_of

MODEL = "tiny-llama:float32:test"
BLOCK = 16
LAYOUT = KVLayout(2, (2, 16), (2, 16))  # the tiny llama's: 2 layers, 2 KV heads of 16


def kv_of(loaded, text: str):
    tokens = prompt_of(loaded, text)
    cache = make_prompt_cache(loaded.model)
    loaded.model(mx.array([tokens]), cache=cache)
    layers = [(c.keys[:, :, :c.offset], c.values[:, :, :c.offset]) for c in cache]
    mx.eval(layers)
    return tokens, layers


LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 12)


def test_chain_hashes_cover_whole_blocks_and_their_past():
    a = chain_hashes(list(range(40)), 16)
    assert len(a) == 2
    assert chain_hashes(list(range(32)), 16) == a
    b = chain_hashes([99] + list(range(1, 40)), 16)
    assert b[0] != a[0] and b[1] != a[1]  # a change early changes every later hash


def test_saved_kv_is_found_after_a_restart_and_reads_back_exactly(tiny_loaded, tmp_path):
    tokens, layers = kv_of(tiny_loaded, LONG)
    assert len(tokens) > 100 and layout_of(tiny_loaded.model) == LAYOUT
    tier = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT, segment_tokens=48)
    assert tier.save(tokens, layers)
    assert tier.close(30)
    end = len(tokens) - len(tokens) % BLOCK
    files = sorted(tier.folder.iterdir())
    assert len(files) == -(-end // 48)  # segments of at most 48 positions
    # A new process:
    again = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT, segment_tokens=48)
    # A follow-up turn: the conversation so far, then more.
    follow = tokens + prompt_of(tiny_loaded, "and then?")
    match = again.match(follow)
    assert match.num_tokens == end and len(match.segments) == len(files)
    read, back = again.read(match)
    assert read == end
    for (k0, v0), (k1, v1) in zip(layers, back):
        assert mx.array_equal(k0[:, :, :end], k1).item()
        assert mx.array_equal(v0[:, :, :end], v1).item()
    # Saving the longer conversation writes only what the disk lacks.
    tokens2, layers2 = kv_of(tiny_loaded, LONG + " and the dog sleeps on")
    before = again.written_bytes
    again.save(tokens2, layers2)
    again.close(30)
    assert 0 < again.written_bytes - before < sum(f.stat().st_size for f in files)
    # Another model's tier in the same root sees none of it.
    other = DiskTier(tmp_path, "another-model", BLOCK, 1 << 30, layout=LAYOUT)
    assert other.match(follow).num_tokens == 0


def test_a_damaged_file_is_removed_and_the_match_ends_before_it(tiny_loaded, tmp_path):
    tokens, layers = kv_of(tiny_loaded, LONG)
    tier = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT, segment_tokens=32)
    tier.save(tokens, layers)
    tier.close(30)
    again = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT, segment_tokens=32)
    match = again.match(tokens)
    second = match.segments[1][0]
    data = bytearray(second.path.read_bytes())
    data[-5] ^= 0xFF
    second.path.write_bytes(bytes(data))
    read, back = again.read(match)
    assert read == match.segments[0][1] and back[0][0].shape[2] == read
    assert not second.path.exists() and "could not be used" in again.notes[-1]
    assert again.match(tokens).num_tokens == read  # it is gone from the index too
    # A file of another format under a segment's name is refused the same way.
    first = match.segments[0][0]
    first.path.write_bytes(b"GGUF" + bytes(100))
    assert again.read(again.match(tokens)) == (0, [])
    assert not first.path.exists() and again.match(tokens).num_tokens == 0


def test_a_prefix_shorter_than_a_saved_segment_uses_its_first_blocks(tiny_loaded, tmp_path):
    """A conversation resent without its last answer: the saved segment runs
    past the prompt, and its first blocks are that prompt's KV."""
    tokens, layers = kv_of(tiny_loaded, LONG)
    tier = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT)  # one segment for all of it
    tier.save(tokens, layers)
    tier.close(30)
    again = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT)
    shorter = tokens[:50] + [7, 7, 7]
    match = again.match(shorter)
    assert match.num_tokens == 48 and len(match.segments) == 1
    read, back = again.read(match)
    assert read == 48 and mx.array_equal(back[0][0], layers[0][0][:, :, :48]).item()
    # A file whose header cannot be read is removed when the tier opens.
    (again.folder / "junk_0_16.kv").write_bytes(b"TANDEMKV" + bytes(8))
    third = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT)
    assert not (third.folder / "junk_0_16.kv").exists() and third.notes
    assert third.match(shorter).num_tokens == 48


def test_the_budget_evicts_the_least_recently_used_chat(tiny_loaded, tmp_path):
    first, kv1 = kv_of(tiny_loaded, LONG)
    second, kv2 = kv_of(tiny_loaded, "numbers 0123456789 " * 10)
    tier = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT)
    tier.save(first, kv1)
    tier.close(30)
    one_chat = tier.nbytes
    tier.budget_bytes = one_chat  # room for the first chat, not both
    tier.match(first)  # used just now: the newest
    tier.save(second, kv2)
    tier.close(30)
    assert tier.nbytes <= tier.budget_bytes
    assert tier.match(second).num_tokens > 0 and tier.match(first).num_tokens == 0


def test_a_full_disk_stops_saving_with_one_note(tiny_loaded, tmp_path, monkeypatch):
    tokens, layers = kv_of(tiny_loaded, LONG)
    tier = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT)

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(kv_file, "write", full)
    tier.save(tokens, layers)
    tier.close(30)
    assert not tier.saving and tier.notes == ["Saving KV to disk stopped: No space left on device."]
    assert tier.save(tokens, layers) is False and tier.match(tokens).num_tokens == 0


def test_a_slow_writer_drops_saves_instead_of_blocking(tiny_loaded, tmp_path, monkeypatch):
    import threading

    tokens, layers = kv_of(tiny_loaded, LONG)
    tier = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT)
    gate = threading.Event()
    real = kv_file.write
    monkeypatch.setattr(kv_file, "write", lambda p, d: gate.wait(30) and real(p, d))
    results = [tier.save(tokens, layers) for _ in range(20)]  # returns at once each time
    assert results.count(False) == tier.dropped > 0
    gate.set()
    assert tier.close(30)
    assert tier.match(tokens).num_tokens > 0


def test_two_processes_sharing_a_folder_see_each_others_files(tiny_loaded, tmp_path):
    """`tandem serve` beside the app: each its own tier on one folder. What
    one writes the other finds at its next look (one stat when nothing
    changed); what one removes the other forgets; a temporary file another
    process is writing is left alone."""
    import os
    import time

    tokens, layers = kv_of(tiny_loaded, LONG)
    app, server = (DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT) for _ in range(2))
    writing = server.folder / ".kv-in-progress.tmp"
    writing.write_bytes(b"half a file")
    DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT)  # a third opening leaves it alone
    assert writing.exists()
    os.utime(writing, (time.time() - 7200, time.time() - 7200))  # an hour-old leftover
    DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT)
    assert not writing.exists()
    app.save(tokens, layers)
    app.close(30)
    assert server.match(tokens).num_tokens == 0  # not looked yet
    server.refresh()
    match = server.match(tokens)
    assert match.num_tokens > 0
    assert server.read(match)[0] == match.num_tokens
    assert app.clear() > 0
    server.refresh()
    assert server.match(tokens).num_tokens == 0 and server.nbytes == 0


def test_a_prefix_the_ram_cache_evicts_is_saved_if_the_disk_lacks_it(tiny_loaded, tmp_path):
    """The RAM prefix cache hands what it evicts to the disk tier: a prefix
    the disk does not hold is written (and reads back bit for bit); one it
    holds already is not written again."""
    from mlx_lm.models.cache import KVCache

    from engine.runtime.prefix import PrefixCache

    def caches_of(layers):
        out = []
        for k, v in layers:
            c = KVCache()
            c.keys, c.values, c.offset = k, v, k.shape[2]
            out.append(c)
        return out

    first, first_kv = kv_of(tiny_loaded, LONG)
    second, second_kv = kv_of(tiny_loaded, "A different chat altogether. " * 20)
    end = len(first) - len(first) % BLOCK
    block_bytes = sum(k.nbytes + v.nbytes for k, v in first_kv) * BLOCK // len(first)
    ram = PrefixCache(BLOCK, budget_bytes=block_bytes * (end // BLOCK))  # one chat fits
    ram.disk = tier = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT, segment_tokens=48)
    ram.insert(first, caches_of(first_kv))
    assert ram.cached_length(first) == end and tier.match(first).num_tokens == 0
    ram.insert(second, caches_of(second_kv))  # evicts the first chat from RAM
    assert ram.cached_length(first) < end
    assert tier.close(30)
    match = tier.match(first)
    assert match.num_tokens == end
    read, back = tier.read(match)
    for (k0, v0), (k1, v1) in zip(first_kv, back):
        assert mx.array_equal(k0[:, :, :end], k1).item()
        assert mx.array_equal(v0[:, :, :end], v1).item()
    written = tier.written_bytes
    ram.insert(first, caches_of(first_kv))  # evicts the second, which is not on disk
    ram.insert(second, caches_of(second_kv))  # evicts the first again: on disk already
    assert tier.close(30)
    assert tier.match(second).num_tokens == len(second) - len(second) % BLOCK
    assert tier.written_bytes - written < written  # the second chat only, not the first again


def test_forgetting_a_chat_removes_only_what_no_other_chat_uses(tiny_loaded, tmp_path):
    """Deleting a chat (kv_owners.py): segments only it used go; a prefix it
    shares with another chat stays until that one goes too; an API
    client's segments are never a chat's to remove."""
    from engine.runtime.kv_owners import FILE, release_saved_kv

    tokens, layers = kv_of(tiny_loaded, LONG)
    more, more_kv = kv_of(tiny_loaded, LONG + " and the fox ran home to its den at last")
    other, other_kv = kv_of(tiny_loaded, "A different chat altogether. " * 12)
    tier = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT, segment_tokens=48)
    tier.save(tokens, layers, "1")
    tier.save(more, more_kv, "2")  # chat 2 continues chat 1's prefix
    tier.save(other, other_kv, "api:client")
    assert tier.close(30)
    every = set(tier.folder.iterdir())
    tier.forget("1")
    assert tier.close(30)
    assert set(tier.folder.iterdir()) == every  # chat 2 uses all of chat 1's segments
    tier.forget("2")
    assert tier.close(30)
    left = set(tier.folder.iterdir())
    assert left and tier.match(tokens).num_tokens == 0 and tier.match(more).num_tokens == 0
    assert tier.match(other).num_tokens == len(other) - len(other) % BLOCK  # the API's stays
    # With no engine (the app, no model loaded): straight from the folder.
    assert release_saved_kv(tmp_path, "api:client") > 0
    assert not list(tier.folder.glob("*.kv"))
    # A damaged owners list is replaced; saving and forgetting go on.
    (tmp_path / FILE).write_bytes(b"not a database" * 100)
    tier = DiskTier(tmp_path, MODEL, BLOCK, 1 << 30, layout=LAYOUT, segment_tokens=48)
    tier.save(tokens, layers, "7")
    tier.forget("7")
    assert tier.close(30)
    assert not list(tier.folder.glob("*.kv"))
    assert any("could not be read" in note for note in tier.owners.notes)
