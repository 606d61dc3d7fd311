"""The prefix cache: KV of token prefixes already computed, shared by all lanes.

A block trie (engine/core/prefix_trie.py, plain Python) whose payloads are each
block's keys and values for every layer. `PrefixCache` adds the MLX side:
cutting a request's KV into blocks and stitching blocks back into mlx-lm
`KVCache`s. A lane's scheduler calls `match` (plain Python: the payloads it
returns stay referenced, so eviction meanwhile cannot take them away) and its
runner `materialize`s the match into caches.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from ..core.prefix_trie import PrefixMatch, PrefixTrie


@dataclass(slots=True)
class PrefixHit:
    """KV for the first `num_tokens` tokens of a prompt, one cache per layer."""

    num_tokens: int
    caches: list[KVCache]


class PrefixCache:
    """Thread-safe MLX prefix cache over a `PrefixTrie`.

    Payload of a block: (keys, values), each shaped (layers, kv_heads, block,
    head_dim), in their own buffers (never views into a request's cache, so the
    byte accounting is true and a finished request's KV can be freed).
    """

    # Inserts are scheduled, not waited for (below); True restores the wait,
    # for benchmarks/step_host_time.py's A/B only.
    wait_inserts = False

    def __init__(self, block_size: int = 32, budget_bytes: int = 1 << 30):
        self._trie = PrefixTrie(block_size, budget_bytes)
        self._lock = threading.Lock()
        # Set for a model whose caches cannot be cut into blocks (cachekinds.py):
        # then nothing is cached or matched, and this says why.
        self.off_reason: str | None = None
        # The disk tier below it (disk_tier.py; None: none): finished
        # requests' KV is saved there too, and engine/restore.py reads it back;
        # a prefix evicted from RAM that the disk lacks is queued for it
        # (`_spill`, written after the lock is released).
        self.disk = None
        self._spill: list[tuple[list[int], list]] = []
        self._spilled: set[int] = set()  # ids of the nodes already in `_spill`
        self._trie.on_evict = self._evicted

    @property
    def block_size(self) -> int:
        return self._trie.block_size

    @property
    def nbytes(self) -> int:
        return self._trie.nbytes

    @property
    def budget_bytes(self) -> int:
        return self._trie.budget_bytes

    @property
    def num_blocks(self) -> int:
        return self._trie.num_blocks

    def cached_length(self, tokens: list[int], limit: int | None = None) -> int:
        """How many leading tokens are cached (no side effects; plain Python)."""
        if self.off_reason:
            return 0
        with self._lock:
            return len(self._trie.match(tokens, limit, touch=False)) * self.block_size

    def match(self, tokens: list[int], limit: int | None = None) -> PrefixMatch:
        """The longest cached prefix of `tokens[:limit]` (touches its blocks)."""
        if self.off_reason:
            return PrefixMatch(0, ())
        with self._lock:
            chain = self._trie.match(tokens, limit)
            return PrefixMatch(len(chain) * self.block_size,
                               tuple(node.payload for node in chain))

    @staticmethod
    def materialize(match: PrefixMatch, dtype: mx.Dtype | None = None) -> list[KVCache]:
        """Fresh KV caches holding a match's blocks ([] for an empty match)."""
        if not match.payloads:
            return []
        keys = mx.concatenate([k for k, _ in match.payloads], axis=2)
        values = mx.concatenate([v for _, v in match.payloads], axis=2)
        if dtype is not None and keys.dtype != dtype:
            keys, values = keys.astype(dtype), values.astype(dtype)
        caches = []
        for layer in range(keys.shape[0]):
            cache = KVCache()
            cache.keys = keys[layer][None]
            cache.values = values[layer][None]
            cache.offset = keys.shape[2]
            caches.append(cache)
        return caches

    def lookup(self, tokens: list[int], limit: int | None = None,
               dtype: mx.Dtype | None = None) -> PrefixHit:
        """Fresh KV caches holding the longest cached prefix of `tokens[:limit]`."""
        match = self.match(tokens, limit)
        return PrefixHit(match.num_tokens, self.materialize(match, dtype))

    def insert(self, tokens: list[int], caches: list[KVCache]) -> int:
        """Cache the full blocks of `tokens`, whose KV is in `caches` (batch 1)."""
        if self.off_reason or not caches or caches[0].keys is None:
            return 0
        length = min(len(tokens), caches[0].offset)
        tokens = tokens[:length]
        b = self.block_size
        if length < b:
            return 0
        with self._lock:
            missing_from = len(self._trie.match(tokens, touch=False)) * b
        if missing_from >= length - length % b:
            with self._lock:
                self._trie.match(tokens)  # refresh LRU
            return 0
        end = length - length % b
        blocks = [_cut_block(caches, start, start + b) for start in range(missing_from, end, b)]
        # Scheduled, not waited for: on a lane's thread the copies queue behind
        # the step in flight, and the host goes on to build the next one (a
        # wait here would leave the device idle meanwhile). A reader on
        # another thread or stream waits for them (MLX's events).
        (mx.eval if self.wait_inserts else mx.async_eval)(blocks)
        first_new = missing_from // b

        def make_payload(i: int):
            # Another lane may have changed the trie since we looked: cut any
            # block we did not prepare now.
            if i >= first_new:
                k, v = blocks[i - first_new]
            else:
                k, v = _cut_block(caches, i * b, (i + 1) * b)
                mx.eval(k, v)
            return (k, v), k.nbytes + v.nbytes

        with self._lock:
            added = self._trie.insert(tokens, make_payload)
            spill, self._spill, self._spilled = self._spill, [], set()
        self._save_evicted(spill)
        return added

    def _evicted(self, leaf) -> None:
        """The trie evicts `leaf` (under the lock): its whole prefix (the
        ancestors are still in place) goes to `_spill` for the disk tier,
        unless a deeper prefix holding it already did. No MLX work here."""
        if self.disk is None or id(leaf) in self._spilled:
            return
        path, node = [], leaf
        while node.parent is not None:
            path.append(node)
            node = node.parent
        path.reverse()
        self._spilled.update(id(n) for n in path)
        self._spill.append(([t for n in path for t in n.tokens], [n.payload for n in path]))

    def _save_evicted(self, spill: list[tuple[list[int], list]]) -> None:
        """Queue evicted prefixes the disk does not hold (plain Python: its
        index answers; the writer thread stitches and writes the blocks)."""
        disk = self.disk
        for tokens, payloads in spill:
            if disk is not None and disk.match(tokens, touch=False).num_tokens < len(tokens):
                disk.save(tokens, BlockKV(tuple(payloads), self.block_size))

    def drop(self, tokens: list[int]) -> int:
        """Forget the cached KV that prefixes `tokens`, here and on disk (a
        step failed on it): blocks removed from RAM."""
        with self._lock:
            removed = self._trie.drop(tokens)
        if self.disk is not None:
            self.disk.drop(tokens)
        return removed

    def clear(self) -> None:
        with self._lock:
            self._trie.clear()


@dataclass(slots=True, frozen=True)
class BlockKV:
    """A prefix's KV as the trie keeps it: a payload per block, (keys,
    values) each (layers, heads, block, head_dim). `layers(start, end)` gives
    positions [start, end) (block-aligned) as [(keys, values)] per layer,
    each (1, heads, n, head_dim): the disk writer's input."""

    payloads: tuple
    block_size: int

    def layers(self, start: int, end: int) -> list[tuple[mx.array, mx.array]]:
        chosen = self.payloads[start // self.block_size:end // self.block_size]
        keys = mx.concatenate([k for k, _ in chosen], axis=2)
        values = mx.concatenate([v for _, v in chosen], axis=2)
        return [(keys[i:i + 1], values[i:i + 1]) for i in range(keys.shape[0])]


def _cut_block(caches: list[KVCache], start: int, end: int) -> tuple[mx.array, mx.array]:
    """Keys and values of positions [start, end) of every layer, as own buffers."""
    keys = mx.concatenate([c.keys[:, :, start:end] for c in caches], axis=0)
    values = mx.concatenate([c.values[:, :, start:end] for c in caches], axis=0)
    return mx.contiguous(keys), mx.contiguous(values)
