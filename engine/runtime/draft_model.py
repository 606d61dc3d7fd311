"""A draft model: a second, small model sharing the target's tokenizer that
proposes the tokens the target will probably write (issue 32).

`check_draft` is the load-time check (the same tokenizer, caches that can
rewind); `ModelDrafter` is one request's drafter, with the same interface
as core/drafts.py's LookupDrafter (`extend`, `available`, `propose`), so the
DraftPlanner, verify_rows and the lanes treat both alike. It holds the
request's own draft KV (a plain mlx-lm prompt cache) and keeps what the
target accepted: after a verification, the drafts that were rejected leave
its cache (one trim) and the accepted ones stay, so the next proposal feeds
only the tokens the draft has not seen (the target's own token).

Proposals are the draft's greedy choices. A sampled row accepts a proposed
token only where the target's own draw (keyed by its position, sampling.py)
equals it, so the answer is the one the target writes without drafts,
greedy or sampled; rejection sampling would accept more often for sampled
rows, but a seeded answer would then depend on the draft (engine/README.md,
"Drafts")."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext

import mlx.core as mx
from mlx_lm.models.cache import (KVCache, can_trim_prompt_cache, make_prompt_cache,
                                 trim_prompt_cache)

from ..core.errors import EngineError

PREFILL_CHUNK = 512  # tokens the draft model reads at once when it catches up


def check_draft(target, draft) -> None:
    """Raise EngineError unless `draft` (a LoadedModel) can draft for `target`:
    the same tokens for the same ids, the same stop tokens, and caches that
    can rewind (a larger, padded vocabulary is fine: ModelDrafter cuts it)."""
    names = f"the draft model {draft.name or draft.label!r} and {target.name or target.label!r}"
    if draft.model is not target.model:
        mine, theirs = _vocab(target.tokenizer), _vocab(draft.tokenizer)
        if mine != theirs:
            differ = len(set(mine.items()) ^ set(theirs.items()))
            raise EngineError(
                f"Cannot draft: {names} have different tokenizers ({len(theirs):,} and "
                f"{len(mine):,} tokens, {differ:,} entries differ). A draft model must "
                f"share the target's tokenizer, as a smaller model of the same family does.",
                "bad-argument")
        if set(draft.stop_token_ids) != set(target.stop_token_ids):
            raise EngineError(f"Cannot draft: {names} end answers with different tokens.",
                              "bad-argument")
    caches = make_prompt_cache(draft.model)
    # Only plain KV caches: a sliding window that has wrapped cannot take its
    # rejected drafts back (mlx-lm's trim then does nothing), nor can a
    # recurrent layer's state.
    if not can_trim_prompt_cache(caches) or any(type(c) is not KVCache for c in caches):
        raise EngineError(f"Cannot draft with {draft.name or draft.label!r}: its caches "
                          f"cannot rewind (a sliding window or a recurrent layer).",
                          "bad-argument")


def _vocab(tokenizer) -> dict[str, int]:
    inner = getattr(tokenizer, "_tokenizer", tokenizer)
    return dict(inner.get_vocab())


class ModelDrafter:
    """One request's draft-model drafter (LookupDrafter's interface).

    `tokens`: what the request has (prompt, then accepted answer), as
    `extend` tells it; `propose(k)` feeds the draft model what its cache
    lacks and returns its k greedy next tokens. `vocab`: the target's
    vocabulary size (a draft with a larger, padded vocabulary never
    proposes an id the target does not have)."""

    def __init__(self, model, prompt: Sequence[int], vocab: int | None = None,
                 site: "DraftSite | None" = None):
        self.model = model
        self.vocab = vocab
        self.site = site  # where its forwards run (None: the calling lane's stream)
        self.tokens: list[int] = []
        self.answer_start = len(prompt)
        self.cache = make_prompt_cache(model)
        # The cache holds tokens[:_known] and then _drafted (the last
        # proposal but its final token; `tokens` only grows, so no more
        # than the proposal's tail is ever compared).
        self._known = 0
        self._drafted: list[int] = []
        self.extend(prompt)

    def extend(self, tokens: Sequence[int]) -> None:
        self.tokens.extend(int(t) for t in tokens)

    def available(self, k: int) -> int:
        """How many tokens a proposal after the next fed token could hold: a
        model always has k (asked on the host, before anything runs)."""
        return max(k, 0)

    def propose(self, k: int) -> list[int]:
        """The draft's k greedy tokens after `tokens` ([] for k <= 0)."""
        if k <= 0 or not self.tokens:
            return []
        cached = self._known + len(self._drafted)
        kept = self._known + _common(self._drafted, self.tokens[self._known:])
        kept = min(kept, len(self.tokens) - 1)  # the last token is fed: its logits draw
        if cached > kept:
            trim_prompt_cache(self.cache, cached - kept)
        lane, device = self.site.choose() if self.site is not None else (None, None)
        with mx.stream(device) if device is not None else nullcontext():
            proposal = self._draft(self.tokens[kept:], k, lane)
        # The cache now holds every known token and the proposal but its last.
        self._known, self._drafted = len(self.tokens), proposal[:-1]
        return proposal

    def _draft(self, todo: list[int], k: int, lane: str | None) -> list[int]:
        while len(todo) > PREFILL_CHUNK:  # a long catch-up (the prompt) in chunks
            self.model(mx.array([todo[:PREFILL_CHUNK]]), cache=self.cache)
            mx.eval([c.state for c in self.cache])
            todo = todo[PREFILL_CHUNK:]
        start = time.perf_counter()
        # The rest (after an accepted run: its last token and the target's
        # own) in the first draft forward; nothing waits until all k are drawn.
        y, drafted = mx.array([todo]), []
        for _ in range(k):
            logits = self.model(y, cache=self.cache)[:, -1, :]
            if self.vocab is not None and logits.shape[-1] > self.vocab:
                logits = logits[:, :self.vocab]
            y = mx.argmax(logits, axis=-1, keepdims=True)
            drafted.append(y)
        proposal = mx.concatenate(drafted, axis=1)[0].tolist()  # one wait for all k
        if self.site is not None:
            self.site.observe(lane, (time.perf_counter() - start) / k)
        return proposal


class DraftSite:
    """A verifying lane's draft placement in MLX terms: core/draft_place.py
    decides among `candidates()` (lane name -> its device, "gpu" or "cpu");
    the draft's forwards run on that device's stream in this lane's thread
    (MLX arrays are shared: unified memory on Apple silicon, managed memory
    under CUDA), so its KV stays where it is whichever device reads it next."""

    def __init__(self, placement, candidates: Callable[[], dict[str, str]]):
        self.placement, self.candidates = placement, candidates

    def choose(self) -> tuple[str, mx.Device]:
        lanes = self.candidates()
        lane = self.placement.choose(list(lanes))
        return lane, mx.gpu if lanes.get(lane) == "gpu" else mx.cpu

    def observe(self, lane: str, seconds_per_token: float) -> None:
        self.placement.observe(lane, seconds_per_token)


def _common(a: list[int], b: list[int]) -> int:
    """The length of a's and b's common start."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
