"""Per-request token choice over a batch of logits, built on mlx-lm's samplers.

Greedy rows of a batch are picked with one argmax; rows with temperature use
mlx-lm's top-p / min-p / top-k filters and a per-request PRNG key, so a seeded
request gives the same tokens alone or batched.
"""

from __future__ import annotations

import os

import mlx.core as mx
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p, make_repetition_penalty

from ..core.params import SamplingParams


class TokenSampler:
    """The sampling state of one request: its PRNG key and logits processors."""

    def __init__(self, params: SamplingParams, matcher=None):
        self.params = params
        self.matcher = matcher  # llguidance's, for a request with a grammar (constrain.py)
        seed = params.seed if params.seed is not None else int.from_bytes(os.urandom(4), "little")
        self._key = mx.random.key(seed)
        self._processors = []
        # Logprobs (params.logprobs): those of the token sampled and not yet
        # fed (lazy arrays), and those of the token being fed this step.
        self._pending: tuple | None = None
        self._fed: tuple | None = None
        if params.repetition_penalty != 1.0:
            self._processors.append(
                make_repetition_penalty(params.repetition_penalty, params.repetition_context_size)
            )

    @property
    def needs_context(self) -> bool:
        return bool(self._processors)

    @property
    def is_plain_greedy(self) -> bool:
        return self.params.is_greedy and not self._processors

    @property
    def arrays(self) -> list[mx.array]:
        """Its device state (the PRNG key). Evaluate before another lane's
        thread uses the sampler: MLX cannot run, on one thread, work still
        recorded on another thread's stream ('There is no Stream(cpu, 1) in
        current thread'); a split's key stays lazy after its sibling ran."""
        return [self._key, *(self._pending or ())]

    @property
    def wants_logprobs(self) -> bool:
        return self.params.logprobs is not None

    def note_logprobs(self, logits: mx.array, token: mx.array) -> None:
        """The raw distribution's log-probabilities of `token` (shape (1,))
        and of the likeliest alternatives, from the same logits it was sampled
        from (before processors, temperature and filters); kept lazily."""
        row = logits.astype(mx.float32)
        lp = row - mx.logsumexp(row, axis=-1, keepdims=True)
        chosen = mx.take_along_axis(lp, token.reshape(1, 1).astype(mx.uint32), axis=-1)
        k = self.params.logprobs
        if k:
            ids = mx.argpartition(-lp, kth=k - 1, axis=-1)[:, :k]
            self._pending = (chosen, ids, mx.take_along_axis(lp, ids, axis=-1))
        else:
            self._pending = (chosen,)

    def feed(self) -> None:
        """Its sampled token is fed to the model now: its logprobs go with it."""
        self._fed, self._pending = self._pending, None

    def read_fed(self) -> tuple | None:
        """The fed token's (logprob, ((id, logprob), ...) likeliest first), or None."""
        fed, self._fed = self._fed, None
        if fed is None:
            return None
        chosen = fed[0].item()
        if len(fed) == 1:
            return chosen, ()
        ids, lps = fed[1].tolist()[0], fed[2].tolist()[0]
        return chosen, tuple(sorted(zip(ids, lps), key=lambda p: -p[1]))

    def sample(self, logits: mx.array, context: mx.array | None) -> mx.array:
        """Pick a token from one row of logits (shape (1, V)); returns shape (1,)."""
        for processor in self._processors:
            logits = processor(context if context is not None else mx.array([], mx.uint32), logits)
        if self.params.is_greedy:
            return mx.argmax(logits, axis=-1)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        p = self.params
        if 0 < p.top_p < 1.0:
            logprobs = apply_top_p(logprobs, p.top_p)
        if p.min_p > 0:
            logprobs = apply_min_p(logprobs, p.min_p)
        if p.top_k > 0:
            logprobs = apply_top_k(logprobs, p.top_k)
        self._key, sub = mx.random.split(self._key)
        return mx.random.categorical(logprobs * (1.0 / p.temperature), key=sub)


def sample_rows(logits: mx.array, samplers: list[TokenSampler], context_of,
                masks: mx.array | None = None) -> mx.array:
    """Sample one token per row of `logits` (B, V); returns shape (B,), lazily.

    `context_of(i)` gives row i's token history (an mx.array) for processors
    such as the repetition penalty; it is only called for rows that need it.
    `masks` (B, V): the tokens each row may take (constrained rows); logprobs
    are read from the logits before it.
    """
    raw = logits
    if masks is not None:
        logits = mx.where(masks, logits, mx.array(-mx.inf, logits.dtype))
    if all(s.is_plain_greedy for s in samplers):
        tokens = mx.argmax(logits, axis=-1)
    else:
        rows = []
        for i, sampler in enumerate(samplers):
            context = context_of(i) if sampler.needs_context else None
            rows.append(sampler.sample(logits[i : i + 1], context))
        tokens = mx.concatenate(rows, axis=0)
    for i, sampler in enumerate(samplers):
        if sampler.wants_logprobs:  # from the same forward pass: no second one
            sampler.note_logprobs(raw[i : i + 1], tokens[i : i + 1])
    return tokens


def pending_arrays(samplers: list[TokenSampler]) -> list[mx.array]:
    """The logprob arrays the last sampling left lazy (to evaluate with it)."""
    return [a for s in samplers if s.wants_logprobs for a in (s._pending or ())]
