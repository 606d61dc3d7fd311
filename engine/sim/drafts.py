"""SIMULATION of drafts (issue 32): the production DraftPlanner
(engine/core/drafts.py) decides, step by step, whether a lane verifies
drafts and how wide, from the step times it sees on the virtual clock; only
the drafter and the verifying step's time are simulated.

- `SimDrafter` proposes the request's true next tokens (the simulated
  answer), each one right with chance `acceptance` until the first wrong
  one: acceptance is a workload parameter (a copy task ~0.85-0.95 with
  prompt lookup on the bundled model, open chat ~0.1-0.3 where lookup finds
  a match at all). Its draws are keyed by (request, position), so the
  planner's guess before a step and the proposal after it agree.
- `DraftCost` is a lane's time for a verifying step: a plain step of the
  batch, plus `slope` x (a one-stream step) per extra position per row
  (compute: a CPU pays ~0.06-0.1 of a one-stream step per position here; a
  GPU at small batch nearly nothing), plus `sync_s`, the overlap a
  verifying step gives up (the host builds the next step only after the
  accepted counts are read: ~the host's time per step on a GPU, hidden on a
  CPU).
Numbers from here are never measured speed."""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass

from ..core.costmodel import CostModel
from ..core.drafts import DraftPlanner
from ..core.request import Request


@dataclass(slots=True, frozen=True)
class DraftCost:
    slope: float = 0.08  # of a one-stream step, per extra position per row
    sync_s: float = 0.0  # the pipelining a verifying step gives up
    draft_s: float = 0.0  # per proposed token: a draft model's forward (0: lookup)

    def verify_s(self, cost: CostModel, rows: int, width: int, context: int,
                 prefill: int, contended: bool) -> float:
        plain = cost.step_s(rows, context, prefill, contended)
        one = cost.step_s(1, context // max(rows, 1), 0, contended)
        extra = rows * (width - 1)
        return plain + one * self.slope * extra + self.sync_s + self.draft_s * extra


class SimDrafter:
    """Proposes a simulated request's true next tokens, each right with
    chance `acceptance` until the first wrong one."""

    def __init__(self, request: Request, truth, acceptance: float):
        self.request, self.truth, self.acceptance = request, truth, acceptance
        self.tokens: list[int] = list(request.prompt_ids)

    def extend(self, tokens) -> None:
        self.tokens.extend(tokens)

    def available(self, k: int) -> int:
        return max(len(self.propose(k + 1)) - 1, 0)

    def propose(self, k: int) -> list[int]:
        # The runner's numbering: the step that commits output token n reads
        # index n + 1 (engine/sim/runner.py).
        at = len(self.tokens) - self.request.num_prompt + 1
        out = []
        for j in range(k):
            token = self.truth(self.request, at + j)
            if self._miss(at + j):
                out.append(token + 1)  # a wrong token; the proposal ends with it
                break
            out.append(token)
        return out

    def _miss(self, index: int) -> bool:
        key = zlib.crc32(f"{self.request.request_id}:{index}".encode())
        return random.Random(key).random() >= self.acceptance


class SimDrafting:
    """A simulated lane's drafting: the production planner, this drafter."""

    def __init__(self, acceptance: float, cost: DraftCost, stop_ids: set[int],
                 context_length: int, truth):
        self.cost = cost
        self.truth = truth
        self.planner = DraftPlanner(stop_ids, context_length,
                                    lambda r: SimDrafter(r, truth, acceptance))

    def step(self, requests: list[Request], tokens: list[int]):
        """Before a step whose rows read `tokens`: its width (0: plain), the
        accepted tokens by row and how many positions were proposed."""
        width = self.planner.plan(requests, None)
        if not width:
            return 0, {}, 0
        proposals = self.planner.proposals(requests, tokens)
        accepted, extra = [], {}
        for row, (request, proposal) in enumerate(zip(requests, proposals)):
            start = request.num_output + 2  # the index after the token fed now
            count = 0
            while count < len(proposal) and proposal[count] == self.truth(request, start + count):
                count += 1
            accepted.append(count)
            if count:
                extra[row] = proposal[:count]
        self.planner.verified(requests, proposals, accepted)
        return 1 + max((len(p) for p in proposals), default=0), extra, \
            sum(len(p) for p in proposals)
