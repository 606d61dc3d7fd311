"""A batch KV cache whose rows each have their own length (issue 32).

mlx-lm's `BatchKVCache` keeps one write index for the whole batch (rows are
left-padded to end together), so taking back a different number of
positions per row means rolling every row's keys and values
(`finalize`): O(KV) per step. Here each row writes at its own end instead
(a scatter of the step's new positions), the mask lets each query see
its own row's keys up to itself, and RoPE takes each row's length as its
offset. Taking back a row's rejected drafts is then one number per row
(`rewind`); the stale keys behind a row's end are masked and overwritten by
its next step. The buffer is as long as the longest row (right padding in
place of mlx-lm's left padding: the same bytes).

A lane that drafts decodes its batch on these (plain `KVCache` layers
only: a sliding window or a recurrent state cannot rewind); the interface
is mlx-lm's batch cache one (`merge`, `extend`, `extract`, `filter`,
`trim`, `make_mask`), so models run on it unchanged."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import KVCache, _BaseCache


class Offsets:
    """The rows' lengths as a device array, made once per step for every
    layer of a batch (each layer's RoPE reads it twice, the mask once)."""

    def __init__(self):
        self._key: tuple[int, ...] | None = None
        self._array: mx.array | None = None

    def of(self, lengths: list[int]) -> mx.array:
        key = tuple(lengths)
        if key != self._key:
            self._key, self._array = key, mx.array(lengths)
        return self._array


class RaggedKVCache(_BaseCache):
    """One layer's keys and values for a batch of rows of any lengths."""

    step = 256

    def __init__(self, lengths: list[int] | None = None, offsets: Offsets | None = None):
        self.keys: mx.array | None = None
        self.values: mx.array | None = None
        self.lengths: list[int] = list(lengths or [])  # tokens held, per row (host)
        self.offsets = offsets or Offsets()

    # ---- what the model reads ------------------------------------------------------
    @property
    def offset(self) -> mx.array:
        """Each row's position of the next token (RoPE's offset), shape (B,)."""
        return self.offsets.of(self.lengths)

    def make_mask(self, N: int, return_array: bool = False, window_size=None, **_):
        """Query j of row b sees that row's keys 0 .. length_b + j."""
        if window_size is not None:
            raise ValueError("a sliding window cannot use a ragged batch cache")
        if N == 1 and not return_array and len(set(self.lengths)) <= 1:
            return None  # rows of one length: every key is the row's own
        width = max(self.lengths) + N
        ends = self.offset[:, None] + mx.arange(N)[None, :]  # (B, N): each query's position
        return (mx.arange(width)[None, None, :] <= ends[:, :, None])[:, None]

    def update_and_fetch(self, keys: mx.array, values: mx.array):
        """Write each row's N new positions at its own end."""
        n = keys.shape[2]
        self._reserve(max(self.lengths) + n, keys, values)
        if len(set(self.lengths)) == 1:
            at = self.lengths[0]
            self.keys[..., at:at + n, :] = keys
            self.values[..., at:at + n, :] = values
        else:
            where = (self.offset[:, None] + mx.arange(n)[None, :])[:, None, :, None]
            self.keys = mx.put_along_axis(self.keys, where, keys, axis=2)
            self.values = mx.put_along_axis(self.values, where, values, axis=2)
        width = max(self.lengths) + n
        self.lengths = [length + n for length in self.lengths]
        return self.keys[..., :width, :], self.values[..., :width, :]

    def _reserve(self, needed: int, keys: mx.array, values: mx.array) -> None:
        have = 0 if self.keys is None else self.keys.shape[2]
        if needed <= have:
            return
        B, H, _, Dk = keys.shape
        grown = -(-needed // self.step) * self.step
        new_k = mx.zeros((B, H, grown - have, Dk), keys.dtype)
        new_v = mx.zeros((B, H, grown - have, values.shape[3]), values.dtype)
        if self.keys is None:
            self.keys, self.values = new_k, new_v
        else:
            self.keys = mx.concatenate([self.keys, new_k], axis=2)
            self.values = mx.concatenate([self.values, new_v], axis=2)

    # ---- taking positions back ---------------------------------------------------------
    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        """Take the last n positions off every row."""
        n = min(n, min(self.lengths, default=0))
        self.lengths = [length - n for length in self.lengths]
        return n

    def rewind(self, counts: list[int]) -> None:
        """Take the last counts[b] positions off row b (its rejected drafts)."""
        self.lengths = [length - min(c, length) for length, c in zip(self.lengths, counts)]

    # ---- rows joining and leaving -----------------------------------------------------
    @classmethod
    def merge(cls, caches: list, offsets: Offsets | None = None) -> "RaggedKVCache":
        """Single requests' `KVCache`s (or ragged ones) as one batch."""
        merged = cls(offsets=offsets)
        for cache in caches:
            merged.extend(cache if isinstance(cache, RaggedKVCache) else _one(cache))
        return merged

    def extend(self, other: "RaggedKVCache") -> None:
        """`other`'s rows join after this cache's (buffers padded to one length)."""
        if other.keys is None:
            self.lengths += other.lengths
            if self.keys is not None and other.lengths:
                self.keys, self.values = _stack(self, _blank(self, len(other.lengths)))
            return
        if self.keys is None:
            blank = _blank(other, len(self.lengths)) if self.lengths else None
            self.keys, self.values = (other.keys, other.values) if blank is None else \
                _stack(blank, other)
        else:
            self.keys, self.values = _stack(self, other)
        self.lengths += other.lengths

    def filter(self, batch_indices) -> None:
        """Keep the rows at `batch_indices` (a list or an array of ints)."""
        keep = [int(i) for i in (batch_indices.tolist() if isinstance(batch_indices, mx.array)
                                 else batch_indices)]
        self.lengths = [self.lengths[i] for i in keep]
        if self.keys is None:
            return
        longest = -(-max(self.lengths, default=0) // self.step) * self.step
        index = mx.array(keep)
        self.keys = self.keys[index, :, :max(longest, 1)]
        self.values = self.values[index, :, :max(longest, 1)]

    def extract(self, idx: int) -> KVCache:
        """Row `idx` as a single request's `KVCache`."""
        cache = KVCache()
        length = self.lengths[idx]
        if self.keys is not None and length:
            cache.keys = mx.contiguous(self.keys[idx:idx + 1, :, :length])
            cache.values = mx.contiguous(self.values[idx:idx + 1, :, :length])
            cache.offset = length
        return cache

    # ---- bookkeeping ---------------------------------------------------------------
    @property
    def state(self):
        return self.keys, self.values

    @state.setter
    def state(self, v):
        self.keys, self.values = v

    def size(self) -> int:
        return max(self.lengths, default=0)

    def empty(self) -> bool:
        return self.keys is None

    @property
    def nbytes(self) -> int:
        return 0 if self.keys is None else self.keys.nbytes + self.values.nbytes


def _one(cache: KVCache) -> RaggedKVCache:
    """A single request's KVCache as a ragged batch of one (no copy)."""
    ragged = RaggedKVCache([cache.offset])
    if cache.keys is not None:
        ragged.keys, ragged.values = cache.keys, cache.values
    return ragged


def _blank(like: RaggedKVCache, rows: int) -> RaggedKVCache:
    """`rows` empty rows shaped as `like`'s."""
    blank = RaggedKVCache([0] * rows)
    B, H, _, Dk = like.keys.shape
    blank.keys = mx.zeros((rows, H, 0, Dk), like.keys.dtype)
    blank.values = mx.zeros((rows, H, 0, like.values.shape[3]), like.values.dtype)
    return blank


def _stack(first: RaggedKVCache, second: RaggedKVCache) -> tuple[mx.array, mx.array]:
    """Both caches' rows in one buffer, as long as the longer one."""
    width = max(first.keys.shape[2], second.keys.shape[2])

    def padded(a: mx.array) -> mx.array:
        extra = width - a.shape[2]
        return a if extra == 0 else mx.pad(a, [(0, 0), (0, 0), (0, extra), (0, 0)])

    return (mx.concatenate([padded(first.keys), padded(second.keys)]),
            mx.concatenate([padded(first.values), padded(second.values)]))
