"""The decode batch of one lane: continuous batching over mlx-lm's batch caches
(BatchKVCache, BatchRotatingKVCache, ArraysCache, CacheList: see cachekinds.py).

Requests join between steps once their prompt is prefilled and leave when they
finish or are cancelled. Steps are pipelined as in mlx-lm: step n+1's graph is
built and started (`mx.async_eval`) before step n's tokens are read back, so
Python overlaps the device.

A lone request decodes on its own caches (`KVCache` and kin, as mlx-lm's
`stream_generate` does), not on a batch cache of one: a batch cache always
builds an attention mask, and a mask keeps MLX off its fused decode attention
(`sdpa_vector` on Metal and CUDA). The caches are merged into batch caches
when a second request joins and extracted again when one is left.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from mlx_lm.models.cache import KVCache

from ..core.request import Request

from .constrain import consume, row_masks
from .ragged import Offsets, RaggedKVCache
from .sampling import TokenSampler, pending_arrays, sample_rows
from .verify import Drafting


class DecodeBatch:
    """Requests decoding together: one token per request per step."""

    def __init__(self, model: nn.Module, solo: bool = True):
        self.model = model
        self.requests: list[Request] = []
        self.samplers: list[TokenSampler] = []
        self.cache: list | None = None  # one cache per layer: batch caches, or the lone one's
        self.allow_solo = solo  # a lone request decodes on its own caches
        self.solo = False  # whether `cache` holds one request's own caches now
        self._next_inputs: mx.array | None = None  # (B,) tokens to feed next
        self.drafts: Drafting | None = None  # the lane drafts (verify.py)
        self.extra: dict[int, list[int]] = {}  # the last step's accepted drafts, by row
        self.extra_logprobs: dict[int, list] = {}  # their logprobs, for rows that want them
        self.verified = 0  # positions the last step verified

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def kv_bytes(self) -> int:
        if self.cache is None:
            return 0
        return sum(c.nbytes for c in self.cache)

    def add(self, request: Request, sampler: TokenSampler, caches: list,
            first_token: mx.array) -> None:
        """Join a prefilled request whose first token is `first_token` (shape (1,)).
        The batch owns `caches` from now on."""
        self.add_many([(request, sampler, caches, first_token)])

    def add_many(self, joins: list[tuple[Request, TokenSampler, list, mx.array]]) -> None:
        """Join several prefilled requests at once: one merge of their caches
        and one `extend` per layer, not one per request."""
        if not joins:
            return
        caches = [j[2] for j in joins]
        firsts = [j[3] for j in joins]
        if self.cache is None or not self.requests:
            if len(joins) == 1 and self.allow_solo:
                self.cache, self.solo = list(caches[0]), True
            else:
                self.cache, self.solo = self._batched(*caches), False
            self._next_inputs = firsts[0] if len(firsts) == 1 else mx.concatenate(firsts)
        else:
            if self.solo:  # no longer alone: the lone one's caches become batch caches
                self.cache, self.solo = self._batched(self.cache), False
            for mine, theirs in zip(self.cache, self._batched(*caches)):
                mine.extend(theirs)
            self._next_inputs = mx.concatenate([self._next_inputs, *firsts])
        self.requests.extend(j[0] for j in joins)
        self.samplers.extend(j[1] for j in joins)

    def step(self) -> mx.array:
        """Start one decode step; return the (lazy) tokens it feeds, one per request.

        The returned tokens were sampled by the previous step (or are each new
        request's first token); read them with `.tolist()` after this call.
        """
        self.extra, self.extra_logprobs, self.verified = {}, {}, 0
        if self.drafts is not None and self.drafts.wants(self):
            drafted = self.drafts.step(self)
            self.extra, self.extra_logprobs = drafted.extra, drafted.extra_logprobs
            self.verified = drafted.verified
            return mx.array(drafted.fed, mx.uint32)
        inputs = self._next_inputs
        for sampler in self.samplers:  # the tokens fed now take their logprobs along
            if sampler.wants_logprobs:
                sampler.feed()
        logits = self.model(inputs[:, None], cache=self.cache, **self.row_kwargs())[:, -1, :]
        masks = None
        if any(s.matcher is not None for s in self.samplers):
            # A constrained row's next mask needs the token it is fed now: read
            # it (sampled last step) while the device runs this forward pass.
            mx.async_eval(logits)
            for sampler, token in zip(self.samplers, inputs.tolist()):
                if sampler.matcher is not None:
                    consume(sampler.matcher, token)
            masks = row_masks([s.matcher for s in self.samplers], logits.shape[-1],
                              self.fail_row)
        sampled = sample_rows(logits, self.samplers, lambda i, n: self.requests[i].recent_ids(n),
                              inputs, masks)
        self._next_inputs = sampled
        mx.async_eval(sampled, *pending_arrays(self.samplers))
        return inputs

    def row_kwargs(self) -> dict:
        """What a model that keeps per-request position state takes with each
        step (engine/models/vision.py: an M-RoPE model's rows' deltas)."""
        rows = getattr(self.model, "row_kwargs", None)
        return rows(self.requests) if rows is not None else {}

    def fail_row(self, index: int, why: str) -> None:
        """Its grammar cannot go on: the request ends with `why` at this step's commit."""
        self.requests[index].failure = why

    def fed_logprobs(self) -> list:
        """Per request, the logprobs of the token `step` just returned (read
        after its tokens; [] when no request asked for them)."""
        if not any(s.wants_logprobs for s in self.samplers):
            return []
        return [s.read_fed() if s.wants_logprobs else None for s in self.samplers]

    def extract(self, index: int) -> list:
        """Request `index`'s KV as single-request caches (for the prefix cache)."""
        assert self.cache is not None
        if self.solo:
            return list(self.cache)
        return [c.extract(index) for c in self.cache]

    def next_inputs(self) -> list[int]:
        """The tokens the next step feeds, read from the device (a drafting
        step needs them before it can propose)."""
        assert self._next_inputs is not None
        return self._next_inputs.tolist()

    def set_next(self, tokens: mx.array) -> None:
        """The tokens the next step feeds (a draft step knows its own)."""
        self._next_inputs = tokens

    def pending_token(self, index: int) -> mx.array:
        """The token request `index` will be fed next (sampled, not yet read)."""
        assert self._next_inputs is not None
        return self._next_inputs[index : index + 1]

    def keep(self, indices: list[int]) -> None:
        """Keep only the requests at `indices`; the others' KV is freed."""
        if len(indices) == len(self.requests):
            return
        self.requests = [self.requests[i] for i in indices]
        self.samplers = [self.samplers[i] for i in indices]
        if not indices:
            self.cache = None
            self.solo = False
            self._next_inputs = None
            return
        if len(indices) == 1 and self.allow_solo:  # one left: back on its own caches
            i = indices[0]
            self.cache = [c.extract(i) for c in self.cache]
            self.solo = True
            self._next_inputs = self._next_inputs[i : i + 1]
            return
        idx = mx.array(indices)
        for c in self.cache:
            c.filter(idx)
        self._next_inputs = self._next_inputs[idx]


    def _batched(self, *requests: list) -> list:
        """Requests' layer caches as one batch cache per layer: each kind's
        own merge, or, in a lane that drafts, ragged caches (ragged.py: each
        row rewinds on its own) where every layer is a plain `KVCache`."""
        layers = list(zip(*requests))
        if self.drafts is not None and all(type(c) in (KVCache, RaggedKVCache)
                                           for layer in layers for c in layer):
            offsets = Offsets()
            return [RaggedKVCache.merge(list(layer), offsets) for layer in layers]
        return [type(layer[0]).merge(list(layer)) for layer in layers]
