"""The prefix cache's bookkeeping: a trie over fixed-size token blocks.

Plain Python, payload-agnostic (no MLX): each node is one block of
`block_size` tokens; a node's key in its parent is the block's token tuple, so
a match compares tokens exactly and can never return a wrong prefix. Only full
blocks are cached. Nodes are evicted leaf-first in least-recently-used order to
keep the total under a byte budget. `PrefixMatch` is what a lane's scheduler
gets from a lookup: how many tokens are cached and the blocks' payloads, which
it hands unopened to its runner (engine/runtime/prefix.py builds KV caches from them;
the simulator's payloads are None).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol


@dataclass(slots=True, frozen=True)
class PrefixMatch:
    """The longest cached prefix of a prompt: its length and block payloads."""

    num_tokens: int
    payloads: tuple[Any, ...] = ()


class PrefixIndex(Protocol):
    """What a lane's scheduler asks of a prefix cache (engine/core/scheduler.py)."""

    block_size: int

    def match(self, tokens: list[int], limit: int | None = None) -> PrefixMatch: ...

    def cached_length(self, tokens: list[int], limit: int | None = None) -> int: ...


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
        # Called with each leaf about to be evicted, its ancestors still in
        # place (the disk tier saves what it does not hold yet).
        self.on_evict: Callable[[BlockNode], None] | None = None

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
            if self.on_evict is not None:
                self.on_evict(leaf)
            self._remove(leaf)
            evicted += 1
        return evicted

    def drop(self, tokens: list[int]) -> int:
        """Remove the cached blocks that prefix `tokens` and every block
        chained after the first of them (KV a step failed on: what extends
        it cannot be trusted either); returns the blocks removed."""
        chain = self.match(tokens, touch=False)
        if not chain:
            return 0
        first, removed, todo = chain[0], 0, [chain[0]]
        while todo:
            node = todo.pop()
            todo.extend(node.children.values())
            self.nbytes -= node.nbytes
            self.num_blocks -= 1
            node.payload = None
            removed += 1
        del first.parent.children[first.tokens]
        return removed

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
