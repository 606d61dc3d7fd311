"""The prefix cache: KV of token prefixes already computed, shared by all lanes.

A trie over fixed-size token blocks: each node is one block of `block_size`
tokens and holds that block's keys and values for every layer. A node's key in
its parent is the block's token tuple, so a match compares tokens exactly and
can never return a wrong prefix. Only full blocks are cached. Nodes are evicted
leaf-first in least-recently-used order to keep the total under a byte budget.

`PrefixTrie` is the bookkeeping (plain Python, payload-agnostic);
`PrefixCache` adds the MLX side: cutting a request's KV into blocks and
stitching blocks back into mlx-lm `KVCache`s.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import mlx.core as mx
from mlx_lm.models.cache import KVCache


@dataclass(slots=True, eq=False)
class BlockNode:
    tokens: tuple[int, ...]
    parent: "BlockNode | None"
    payload: Any = None
    nbytes: int = 0
    last_used: int = 0
    children: dict[tuple[int, ...], "BlockNode"] = field(default_factory=dict)

    @property
    def is_leaf(self) -> bool:
        return not self.children


class PrefixTrie:
    """Block trie with LRU eviction under a byte budget. Not thread-safe."""

    def __init__(self, block_size: int, budget_bytes: int):
        if block_size < 1:
            raise ValueError("block_size must be >= 1")
        self.block_size = block_size
        self.budget_bytes = budget_bytes
        self.root = BlockNode(tokens=(), parent=None)
        self.nbytes = 0
        self.num_blocks = 0
        self._clock = itertools.count(1)

    def _blocks(self, tokens: list[int], limit: int | None = None):
        n = len(tokens) if limit is None else min(limit, len(tokens))
        b = self.block_size
        for start in range(0, n - n % b, b):
            yield tuple(tokens[start : start + b])

    def match(self, tokens: list[int], limit: int | None = None, touch: bool = True) -> list[BlockNode]:
        """The longest chain of cached blocks that prefixes `tokens[:limit]`."""
        node, chain = self.root, []
        for block in self._blocks(tokens, limit):
            child = node.children.get(block)
            if child is None:
                break
            chain.append(child)
            node = child
        if touch:
            tick = next(self._clock)
            for n in chain:
                n.last_used = tick
        return chain

    def insert(self, tokens: list[int], make_payload: Callable[[int], tuple[Any, int]]) -> int:
        """Add the full blocks of `tokens` not yet cached; return blocks added.

        `make_payload(i)` builds block i's payload and returns (payload, nbytes).
        """
        node, added = self.root, 0
        tick = next(self._clock)
        for i, block in enumerate(self._blocks(tokens)):
            child = node.children.get(block)
            if child is None:
                payload, nbytes = make_payload(i)
                child = BlockNode(tokens=block, parent=node, payload=payload, nbytes=nbytes)
                node.children[block] = child
                self.nbytes += nbytes
                self.num_blocks += 1
                added += 1
            child.last_used = tick
            node = child
        self.evict_to_budget()
        return added

    def evict_to_budget(self) -> int:
        """Drop least-recently-used leaves until within budget; return count."""
        evicted = 0
        while self.nbytes > self.budget_bytes:
            leaf = min(self._leaves(), key=lambda n: n.last_used, default=None)
            if leaf is None:
                break
            self._remove(leaf)
            evicted += 1
        return evicted

    def clear(self) -> None:
        self.root.children.clear()
        self.nbytes = 0
        self.num_blocks = 0

    def _leaves(self):
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            if node.is_leaf:
                yield node
            else:
                stack.extend(node.children.values())

    def _remove(self, leaf: BlockNode) -> None:
        assert leaf.parent is not None
        del leaf.parent.children[leaf.tokens]
        self.nbytes -= leaf.nbytes
        self.num_blocks -= 1
        leaf.payload = None


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

    def __init__(self, block_size: int = 32, budget_bytes: int = 1 << 30):
        self._trie = PrefixTrie(block_size, budget_bytes)
        self._lock = threading.Lock()

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
        with self._lock:
            return len(self._trie.match(tokens, limit, touch=False)) * self.block_size

    def lookup(self, tokens: list[int], limit: int | None = None,
               dtype: mx.Dtype | None = None) -> PrefixHit:
        """Fresh KV caches holding the longest cached prefix of `tokens[:limit]`."""
        with self._lock:
            chain = self._trie.match(tokens, limit)
            payloads = [node.payload for node in chain]
        if not payloads:
            return PrefixHit(0, [])
        keys = mx.concatenate([k for k, _ in payloads], axis=2)
        values = mx.concatenate([v for _, v in payloads], axis=2)
        if dtype is not None and keys.dtype != dtype:
            keys, values = keys.astype(dtype), values.astype(dtype)
        caches = []
        for layer in range(keys.shape[0]):
            cache = KVCache()
            cache.keys = keys[layer][None]
            cache.values = values[layer][None]
            cache.offset = keys.shape[2]
            caches.append(cache)
        return PrefixHit(keys.shape[2], caches)

    def insert(self, tokens: list[int], caches: list[KVCache]) -> int:
        """Cache the full blocks of `tokens`, whose KV is in `caches` (batch 1)."""
        if not caches or caches[0].keys is None:
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
        mx.eval(blocks)
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
            return self._trie.insert(tokens, make_payload)

    def clear(self) -> None:
        with self._lock:
            self._trie.clear()


def _cut_block(caches: list[KVCache], start: int, end: int) -> tuple[mx.array, mx.array]:
    """Keys and values of positions [start, end) of every layer, as own buffers."""
    keys = mx.concatenate([c.keys[:, :, start:end] for c in caches], axis=0)
    values = mx.concatenate([c.values[:, :, start:end] for c in caches], axis=0)
    return mx.contiguous(keys), mx.contiguous(values)
