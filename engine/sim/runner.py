"""SIMULATION: a lane runner whose steps take the time a cost profile says.

It stands where engine/runtime/runner.py runs the model: the production scheduler
plans the step, this runner "runs" it in virtual time and hands back tokens,
and the production scheduler commits them. Tokens are synthetic ids; a
request's answer ends with the stop token after the length its workload turn
asked for. The prefix cache is the production trie with empty payloads and
true byte counts, so hits and evictions are the engine's.
"""

from __future__ import annotations

import threading
import zlib
from typing import Callable

from ..core.costmodel import CostModel
from ..core.prefix_trie import PrefixMatch, PrefixTrie
from ..core.request import Request
from ..core.step import StepPlan, StepResult

STOP_TOKEN = 0  # the simulated model's end-of-answer token


def answer_token(request: Request, index: int) -> int:
    """The synthetic id of a request's `index`-th output token (never STOP_TOKEN)."""
    return 1_000_000_000 + zlib.crc32(f"{request.request_id}:{index}".encode()) % 1_000_000_000


class SimPrefix:
    """The production block trie with no payloads (what a lane's scheduler asks)."""

    def __init__(self, block_size: int, budget_bytes: int, kv_bytes_per_token: int):
        self._trie = PrefixTrie(block_size, budget_bytes)
        self._block_bytes = block_size * kv_bytes_per_token
        self._lock = threading.Lock()
        self.block_size = block_size

    def match(self, tokens: list[int], limit: int | None = None) -> PrefixMatch:
        with self._lock:
            chain = self._trie.match(tokens, limit)
        return PrefixMatch(len(chain) * self.block_size, tuple(None for _ in chain))

    def cached_length(self, tokens: list[int], limit: int | None = None) -> int:
        with self._lock:
            return len(self._trie.match(tokens, limit, touch=False)) * self.block_size

    def insert(self, tokens: list[int]) -> None:
        with self._lock:
            self._trie.insert(tokens, lambda i: (None, self._block_bytes))


class SimRunner:
    """Runs plans in virtual time: `step_s` from the lane's true cost profile."""

    def __init__(self, cost: CostModel, answer_length: Callable[[Request], int],
                 prefix: SimPrefix):
        self.cost = cost  # the ground truth; the router keeps its own belief
        self.answer_length = answer_length
        self.prefix = prefix
        self.drafting = None  # engine/sim/drafts.py's SimDrafting, when the lane drafts
        self.computed: dict[str, int] = {}  # request id -> positions with KV here

    def truth(self, request: Request, index: int) -> int:
        """The token a step reading output index `index` commits."""
        return STOP_TOKEN if index >= self.answer_length(request) else \
            answer_token(request, index)

    def run(self, plan: StepPlan) -> StepResult:
        for request in plan.cancelled:
            self._cache(request)
        for request, _ in plan.moves:
            self.computed.pop(request.request_id, None)
        # This step reads output token number num_output + 1 of each request.
        tokens = [self.truth(r, r.num_output + 1) for r in plan.decode]
        seconds = self.cost.step_s(len(plan.decode), plan.context, plan.prefill_tokens,
                                   plan.local_contended)
        extra, verified = {}, 0
        if self.drafting is not None and plan.decode:
            width, extra, verified = self.drafting.step(plan.decode, tokens)
            if width > 1:
                seconds = self.drafting.cost.verify_s(
                    self.cost, len(plan.decode), width, plan.context, plan.prefill_tokens,
                    plan.local_contended)
            if plan.prefill:
                self.drafting.planner.disturbed()
            self.drafting.planner.stepped(seconds)  # the step's time, as a lane tells it
        return StepResult(tokens, seconds, {r.request_id: None for r, _ in plan.moves},
                          extra=extra, verified=verified)

    def release(self, requests: list[Request]) -> None:
        for request in requests:
            self._cache(request)

    def _cache(self, request: Request) -> None:
        self.computed.pop(request.request_id, None)
        if request.num_computed:  # as the real runner: KV of every token fed so far
            self.prefix.insert(request.all_ids[: request.num_computed + request.num_output])
