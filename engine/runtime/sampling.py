"""Token choice for a whole batch of logits at once.

One set of array operations serves every row, whatever its settings: the
repetition penalty is one gather and one scatter over the rows' recent
tokens; top-k runs first (a partition, then a sort of k candidates, not of
the vocabulary), and top-p and min-p are read off those sorted candidates
(the same tokens mlx-lm's filters keep: each keeps a run of the likeliest
tokens, so their order does not matter when top-p sums the full
distribution's probabilities); rows without top-k sort the vocabulary,
together. Greedy rows take the argmax.

Each row draws with one uniform number keyed by (its seed, its position in
the answer), computed on the device by an integer hash: a seeded request
gives the same tokens alone or batched, on any lane, and a position can be
drawn again (drafts verified later reuse this)."""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable

import mlx.core as mx

from ..core.params import SamplingParams

_U32 = mx.uint32


class TokenSampler:
    """The sampling state of one request: its seed and position (which key
    its draws), and its logprobs on the way out."""

    def __init__(self, params: SamplingParams, matcher=None):
        self.params = params
        self.matcher = matcher  # llguidance's, for a request with a grammar (constrain.py)
        seed = params.seed if params.seed is not None else int.from_bytes(os.urandom(8), "little")
        self.seed = (seed ^ (seed >> 32)) & 0xFFFFFFFF
        self.position = 0  # tokens drawn so far: the next draw's key
        # Logprobs (params.logprobs): those of the token sampled and not yet
        # fed (lazy arrays), and those of the token being fed this step.
        self._pending: tuple | None = None
        self._fed: tuple | None = None

    @property
    def needs_context(self) -> bool:
        return self.params.repetition_penalty != 1.0

    @property
    def is_plain_greedy(self) -> bool:
        return self.params.is_greedy and not self.needs_context

    @property
    def arrays(self) -> list[mx.array]:
        """Its device state (logprobs not yet read). Evaluate before another
        lane's thread uses the sampler: MLX cannot run, on one thread, work
        still recorded on another thread's stream."""
        return list(self._pending or ())

    @property
    def wants_logprobs(self) -> bool:
        return self.params.logprobs is not None

    def note_logprobs(self, logits: mx.array, token: mx.array) -> None:
        """The raw distribution's log-probabilities of `token` (shape (1,))
        and of the likeliest alternatives, from the same logits it was sampled
        from (before the penalty, temperature and filters); kept lazily."""
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
        return None if fed is None else read_logprobs(fed)

    def drawing_at(self, position: int) -> "TokenSampler":
        """A copy that draws the token at `position` (a verified draft's):
        the same settings and seed, no grammar, its own logprobs."""
        copy = TokenSampler.__new__(TokenSampler)
        copy.params, copy.matcher, copy.seed, copy.position = self.params, None, self.seed, position
        copy._pending = copy._fed = None
        return copy

    def hold(self, draw: "TokenSampler") -> None:
        """The token `draw` drew is this request's next one: keep its logprobs."""
        self._pending = draw._pending

    def sample(self, logits: mx.array, history: list[int] | None = None) -> mx.array:
        """One row of logits (shape (1, V)) -> its token, shape (1,)."""
        return sample_rows(logits, [self], lambda _, n: (history or [])[-n:])


def sample_rows(logits: mx.array, samplers: list[TokenSampler],
                history_of: Callable[[int, int], list[int]], fed: mx.array | None = None,
                masks: mx.array | None = None) -> mx.array:
    """One token per row of `logits` (B, V); returns shape (B,), lazily.

    `history_of(i, n)`: row i's last n tokens so far (prompt and answer, host
    ints), read only for rows with a repetition penalty; `fed` (B,): the tokens fed
    this step (on the device, not yet in the history). `masks` (B, V): the
    tokens each row may take (constrained rows); logprobs are read from the
    logits before it."""
    raw = logits
    if masks is not None:
        logits = mx.where(masks, logits, mx.array(-mx.inf, logits.dtype))
    if all(s.is_plain_greedy for s in samplers):
        tokens = mx.argmax(logits, axis=-1)
    else:
        logits = logits.astype(mx.float32)
        penalised = [i for i, s in enumerate(samplers) if s.needs_context]
        if penalised:
            logits = penalise(logits, penalised, samplers, history_of, fed)
        drawn = [i for i, s in enumerate(samplers) if not s.params.is_greedy]
        tokens = mx.argmax(logits, axis=-1)
        if drawn:
            tokens = _merge(tokens, drawn, _draw(logits, drawn, samplers))
    for i, sampler in enumerate(samplers):
        sampler.position += 1
        if sampler.wants_logprobs:  # from the same forward pass: no second one
            sampler.note_logprobs(raw[i : i + 1], tokens[i : i + 1])
    return tokens


def read_logprobs(arrays) -> tuple:
    """Noted logprobs (note_logprobs) as (logprob, ((id, logprob), ...)
    likeliest first), read from the device."""
    chosen = arrays[0].item()
    if len(arrays) == 1:
        return chosen, ()
    ids, lps = arrays[1].tolist()[0], arrays[2].tolist()[0]
    return chosen, tuple(sorted(zip(ids, lps), key=lambda p: -p[1]))


def pending_arrays(samplers: list[TokenSampler]) -> list[mx.array]:
    """The logprob arrays the last sampling left lazy (to evaluate with it)."""
    return [a for s in samplers if s.wants_logprobs for a in (s._pending or ())]


# ---- the repetition penalty ------------------------------------------------------------
def penalise(logits: mx.array, rows: list[int], samplers: list[TokenSampler],
              history_of, fed: mx.array | None) -> mx.array:
    """mlx-lm's repetition penalty (a logit seen in the last
    `repetition_context_size` tokens: divided by the penalty when positive,
    multiplied when negative), for every row in one gather and one scatter.
    A row's tokens are padded with a copy of one of its own, so that a token
    written twice gets the same value; rows without a penalty (or with no
    tokens yet) write token 0 back as it was (factor 1)."""
    host, factors = [], []
    wanted = set(rows)
    for i, sampler in enumerate(samplers):
        params = sampler.params
        keep = params.repetition_context_size - (1 if fed is not None else 0)
        recent = list(history_of(i, keep)[-keep:]) if i in wanted and keep > 0 else []
        host.append(recent)
        has_any = i in wanted and (recent or fed is not None)
        factors.append(params.repetition_penalty if has_any else 1.0)
    width = max(len(r) for r in host) + (1 if fed is not None else 0)
    if width == 0:
        return logits
    # -1 marks "the token fed this step" (read on the device); a row is
    # padded with its first token, or is token 0 throughout at factor 1.
    padded = []
    for recent, factor in zip(host, factors):
        if factor == 1.0:
            padded.append([0] * width)
        else:
            row = ([-1] if fed is not None else []) + recent
            padded.append(row + [row[0]] * (width - len(row)))
    ids = mx.array(padded, mx.int32)
    if fed is not None:
        ids = mx.where(ids < 0, fed.astype(mx.int32)[:, None], ids)
    ids = ids.astype(_U32)
    seen = mx.take_along_axis(logits, ids, axis=-1)
    factor = mx.array(factors, mx.float32)[:, None]
    seen = mx.where(seen < 0, seen * factor, seen / factor)
    return mx.put_along_axis(logits, ids, seen, axis=-1)


# ---- drawing -------------------------------------------------------------------------------
def _draw(logits: mx.array, rows: list[int], samplers: list[TokenSampler]) -> mx.array:
    """A token for each of `rows` (all with a temperature): rows with top-k
    share a top-K partition (K their largest k); the others sort the whole
    vocabulary together. Returns shape (len(rows),) in the order of `rows`."""
    vocab = logits.shape[-1]
    limited = [i for i in rows if 0 < samplers[i].params.top_k < vocab]
    full = [i for i in rows if i not in limited]
    groups = [g for g in (limited, full) if g]
    at = {i: n for n, i in enumerate(rows)}
    out = mx.zeros((len(rows),), _U32)
    for group in groups:
        width = max(samplers[i].params.top_k for i in group) if group is limited else vocab
        part = logits if group == list(range(logits.shape[0])) else \
            logits[mx.array(group, _U32)]
        tokens = _draw_group(part, [samplers[i] for i in group], width).astype(_U32)
        if len(groups) == 1:
            return tokens
        out = mx.put_along_axis(out, mx.array([at[i] for i in group], _U32), tokens, axis=0)
    return out


def _draw_group(logits: mx.array, samplers: list[TokenSampler], width: int) -> mx.array:
    """Rows whose candidates are their `width` likeliest tokens, sorted."""
    lse = _logsumexp(logits)
    if width < logits.shape[-1]:
        ids = _top_ids(logits, width)
        values = mx.take_along_axis(logits, ids, axis=-1)
        order = mx.argsort(-values, axis=-1)
        ids = mx.take_along_axis(ids, order, axis=-1)
        values = mx.take_along_axis(values, order, axis=-1)
    else:
        ids = mx.argsort(-logits, axis=-1)
        values = mx.take_along_axis(logits, ids, axis=-1)
    logprobs = values - lse  # of the full distribution, likeliest first
    params = [s.params for s in samplers]
    column = mx.arange(width)[None, :]
    top_k = mx.array([p.top_k if 0 < p.top_k < width else width for p in params])[:, None]
    keep = column < top_k
    top_p = mx.array([p.top_p if 0 < p.top_p < 1.0 else 2.0 for p in params],
                     mx.float32)[:, None]
    probs = mx.exp(logprobs)
    keep = keep & ((mx.cumsum(probs, axis=-1) - probs) < top_p)  # mass before it < top_p
    floor = mx.array([math.log(p.min_p) if p.min_p > 0 else -math.inf for p in params],
                     mx.float32)[:, None]
    keep = keep & (logprobs >= logprobs[:, :1] + floor)
    temperature = mx.array([p.temperature for p in params], mx.float32)[:, None]
    scaled = mx.where(keep, logprobs / temperature, -mx.inf)
    weights = mx.exp(scaled - scaled[:, :1])  # the first candidate is always kept
    cdf = mx.cumsum(weights, axis=-1)
    target = _uniform(samplers)[:, None] * cdf[:, -1:]
    choice = mx.minimum(mx.sum(cdf < target, axis=-1), width - 1)
    return mx.take_along_axis(ids, choice[:, None].astype(_U32), axis=-1)[:, 0]


_helper = threading.local()  # per lane thread: a second CPU stream for the sums


def _logsumexp(logits: mx.array) -> mx.array:
    """Each row's log of its summed exponentials (B, 1): the one pass over
    the whole vocabulary that top-p needs. On a CPU, MLX runs a stream's
    work on one core and the exponentials are most of the sampling's time
    (7 ms of ~9.5 for 16 rows of 49,152): half the rows go to a second CPU
    stream (made once on the lane's thread), which runs beside the first
    while the BLAS threads wait. A GPU does it in one pass."""
    rows = logits.shape[0]
    if rows < 4 or mx.default_device() != mx.cpu or (os.cpu_count() or 1) < 2:
        return mx.logsumexp(logits, axis=-1, keepdims=True)
    stream = getattr(_helper, "stream", None)
    if stream is None:
        stream = _helper.stream = mx.new_stream(mx.cpu)
    half = rows // 2
    first = mx.logsumexp(logits[:half], axis=-1, keepdims=True)
    second = mx.logsumexp(logits[half:], axis=-1, keepdims=True, stream=stream)
    return mx.concatenate([first, second], axis=0)


BLOCK = 128  # the vocabulary is read in blocks this wide to find the top k


def _top_ids(logits: mx.array, k: int) -> mx.array:
    """The ids of each row's k largest logits (in no order), exactly: the k
    largest lie in the k blocks with the largest maxima (each block holding
    one of them has a maximum at least the k-th largest), so a partition of
    the block maxima and one of k blocks' logits replace a partition of the
    vocabulary (1.3 ms instead of 6.5 ms for 16 rows of 49,152 on a CPU)."""
    rows, vocab = logits.shape
    blocks = -(-vocab // BLOCK)
    if blocks <= 2 * k:  # a small vocabulary: one partition is as cheap
        return mx.argpartition(-logits, kth=k - 1, axis=-1)[:, :k]
    if blocks * BLOCK != vocab:
        logits = mx.pad(logits, [(0, 0), (0, blocks * BLOCK - vocab)],
                        constant_values=-mx.inf)
    tiled = logits.reshape(rows, blocks, BLOCK)
    best = mx.argpartition(-mx.max(tiled, axis=-1), kth=k - 1, axis=-1)[:, :k]
    picked = mx.take_along_axis(tiled, mx.broadcast_to(best[:, :, None], (rows, k, BLOCK)),
                                axis=1).reshape(rows, k * BLOCK)
    local = mx.argpartition(-picked, kth=k - 1, axis=-1)[:, :k]
    block = mx.take_along_axis(best, local // BLOCK, axis=-1)
    return (block * BLOCK + local % BLOCK).astype(_U32)


def _merge(tokens: mx.array, rows: list[int], drawn: mx.array) -> mx.array:
    """`tokens` with `drawn` at `rows`."""
    if len(rows) == tokens.shape[0]:
        return drawn.astype(tokens.dtype)
    return mx.put_along_axis(tokens, mx.array(rows, _U32), drawn.astype(tokens.dtype), axis=0)


def _mix(h: mx.array) -> mx.array:
    """murmur3's 32-bit finaliser: every input bit moves every output bit."""
    h = h ^ (h >> 16)
    h = h * mx.array(0x85EBCA6B, _U32)
    h = h ^ (h >> 13)
    h = h * mx.array(0xC2B2AE35, _U32)
    return h ^ (h >> 16)


def _uniform(samplers: list[TokenSampler]) -> mx.array:
    """A number in (0, 1) per row, from (seed, position): the same for a
    request alone or batched, computed on the device."""
    seeds = mx.array([s.seed for s in samplers], _U32)
    positions = mx.array([s.position for s in samplers], _U32)
    h = _mix(seeds ^ _mix(positions * mx.array(0x9E3779B9, _U32) + mx.array(0x7F4A7C15, _U32)))
    return ((h >> 8).astype(mx.float32) + 0.5) * (1.0 / (1 << 24))
