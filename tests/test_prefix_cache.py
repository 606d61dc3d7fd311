"""The prefix cache: exact matches only, byte budget, LRU eviction."""

import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache

from engine.core.prefix_trie import PrefixTrie
from engine.runtime.prefix import PrefixCache


def _payload(nbytes):
    return lambda i: (f"block{i}", nbytes)


def test_trie_matches_whole_blocks_only():
    trie = PrefixTrie(block_size=4, budget_bytes=10_000)
    trie.insert(list(range(10)), _payload(10))  # blocks [0..3], [4..7]; 8,9 dropped
    assert trie.num_blocks == 2
    assert len(trie.match(list(range(10)))) == 2
    assert len(trie.match(list(range(7)))) == 1  # second block incomplete
    assert len(trie.match([0, 1, 2, 3, 4, 5, 6, 99])) == 1  # diverges in block 2
    assert trie.match([1, 2, 3, 4]) == []
    assert len(trie.match(list(range(10)), limit=4)) == 1


def test_trie_shares_common_prefixes_and_evicts_lru_leaves():
    trie = PrefixTrie(block_size=2, budget_bytes=50)
    trie.insert([1, 2, 3, 4], _payload(10))
    trie.insert([1, 2, 5, 6], _payload(10))  # shares block (1, 2)
    assert trie.num_blocks == 3 and trie.nbytes == 30
    trie.match([1, 2, 3, 4])  # (3, 4) is now more recent than (5, 6)
    trie.insert([7, 8, 9, 10], _payload(10))  # 50 bytes: at budget
    trie.insert([11, 12], _payload(10))  # over: evicts the LRU leaf (5, 6)
    assert trie.nbytes <= 50
    assert len(trie.match([1, 2, 5, 6])) == 1
    assert len(trie.match([1, 2, 3, 4])) == 2
    # Interior nodes go only after their children.
    trie.budget_bytes = 0
    trie.evict_to_budget()
    assert trie.num_blocks == 0 and trie.nbytes == 0


def _caches_for(model, tokens):
    cache = make_prompt_cache(model)
    model(mx.array(tokens)[None], cache=cache)
    mx.eval([c.state for c in cache])
    return cache


def test_cache_returns_exact_kv_and_respects_budget(tiny_loaded):
    model = tiny_loaded.model
    a = list(range(3, 3 + 40))
    b = a[:16] + list(range(200, 224))  # shares the first block with a
    ca, cb = _caches_for(model, a), _caches_for(model, b)
    block_bytes = sum(c.keys[:, :, :16].nbytes + c.values[:, :, :16].nbytes for c in ca)
    cache = PrefixCache(block_size=16, budget_bytes=3 * block_bytes)
    assert cache.insert(a, ca) == 2  # 40 tokens -> 2 full blocks
    assert cache.insert(b, cb) == 1  # shared first block, one new
    assert cache.nbytes == 3 * block_bytes
    hit = cache.lookup(b + [1, 2, 3])
    assert hit.num_tokens == 32
    for got, ref in zip(hit.caches, cb):
        assert mx.array_equal(got.keys[:, :, :32], ref.keys[:, :, :32])
        assert mx.array_equal(got.values[:, :, :32], ref.values[:, :, :32])
    # A prompt that diverges inside the first block gets nothing.
    assert cache.lookup([3, 4, 5, 99] + a[4:]).num_tokens == 0
    # Over budget: the least recently used leaf goes, never a wrong prefix.
    c = list(range(300, 332))
    cache.insert(c, _caches_for(model, c))
    assert cache.nbytes <= cache.budget_bytes
    for tokens in (a, b, c):
        hit = cache.lookup(tokens)
        ref = _caches_for(model, tokens)
        for got, want in zip(hit.caches, ref):
            assert mx.allclose(got.keys, want.keys[:, :, : hit.num_tokens], atol=1e-5)


@pytest.mark.parametrize("limit", [15, 16, 17])
def test_lookup_limit_leaves_tokens_to_compute(tiny_loaded, limit):
    tokens = list(range(3, 3 + 32))
    cache = PrefixCache(block_size=16, budget_bytes=1 << 30)
    cache.insert(tokens, _caches_for(tiny_loaded.model, tokens))
    assert cache.lookup(tokens, limit=limit).num_tokens == (limit // 16) * 16
    assert cache.cached_length(tokens, limit=limit) == (limit // 16) * 16


def test_trie_drop_removes_a_prefix_and_what_extends_it_with_its_bytes():
    """KV a step failed on (runner._kv_failed): the prefix's blocks and every
    block chained after its first go; another prefix stays; bytes and
    block counts follow."""
    trie = PrefixTrie(2, budget_bytes=1 << 20)
    trie.insert([1, 2, 3, 4, 5, 6], lambda i: (f"a{i}", 10))
    trie.insert([1, 2, 3, 4, 9, 9], lambda i: (f"b{i}", 10))
    trie.insert([7, 7, 8, 8], lambda i: (f"c{i}", 10))
    assert (trie.num_blocks, trie.nbytes) == (6, 60)
    assert trie.drop([1, 2, 3, 4]) == 4  # [1,2] [3,4] [5,6] [9,9]
    assert (trie.num_blocks, trie.nbytes) == (2, 20)
    assert trie.match([1, 2, 3, 4, 5, 6]) == [] and len(trie.match([7, 7, 8, 8])) == 2
    assert trie.drop([5, 5]) == 0
