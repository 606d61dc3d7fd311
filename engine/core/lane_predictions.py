"""What a phase costs on each lane, as the cost-aware router predicts it
(engine/core/policies.py): own time, the delay imposed on the requests already
there, contention charged while the other lanes stay busy, and whether a lane
pays for the whole machine. Plain Python over `LaneView` snapshots."""

from __future__ import annotations

import math

from .costmodel import CostModel
from .router import LaneView


class LanePredictions:
    """The predictions CostAwarePolicy decides with (no state of its own)."""
    @staticmethod
    def _cost(lane: LaneView) -> CostModel:
        if lane.cost is None:
            raise ValueError(f"lane {lane.name} has no cost model")
        return lane.cost

    @staticmethod
    def _contended(lane: LaneView, lanes: list[LaneView]) -> bool:
        # A remote lane counts: its contention is learned like any other lane's
        # (near 0 for a server elsewhere; not for one on this machine).
        return any(o.is_busy for o in lanes if o.name != lane.name)

    def _c(self, lane: LaneView, lanes: list[LaneView]) -> float:
        """The lane's contention as the router trusts it: learned (or stored
        by the last run), else no less than the other local lanes' (the
        cores or the memory bandwidth they share slow both ways). A lane
        that seldom runs beside the others, a CPU lane the router keeps
        idle, would otherwise stay at the 0 it started from and look free."""
        cost = self._cost(lane)
        if cost.contention_known or lane.is_remote:
            return cost.contention
        return max([cost.contention] + [o.cost.contention for o in lanes if o.name != lane.name
                                        and not o.is_remote and o.cost is not None])

    def _cp(self, lane: LaneView, lanes: list[LaneView]) -> float:
        """The same while another lane prefills (CostModel.prefill_contention):
        learned, else no less than the lane's contention nor the others'."""
        cost = self._cost(lane)
        if cost.prefill_contention_known or lane.is_remote:
            return cost.prefill_contention
        return max([self._c(lane, lanes), cost.prefill_contention]
                   + [o.cost.prefill_contention for o in lanes if o.name != lane.name
                      and not o.is_remote and o.cost is not None])

    def _factor(self, lane: LaneView, lanes: list[LaneView]) -> float:
        if not self._contended(lane, lanes):
            return 1.0
        prefilling = any(o.pending_prompt_tokens for o in lanes if o.name != lane.name)
        return 1.0 + (self._cp(lane, lanes) if prefilling else self._c(lane, lanes))

    @staticmethod
    def _others_busy_s(lane: LaneView, lanes: list[LaneView]) -> float:
        """How long the other lanes stay busy with the work they hold now
        (their prefill backlog, queued prompts included, then their decodes'
        expected tokens; a request queued behind a full batch adds a
        stream's worth). A remote lane counts as busy throughout. Queued
        prompts' own decodes are not counted: the plan that sent a prompt
        there may decode it elsewhere (a queued prefill counted as busy
        throughout charged a GPU decode's every step for it)."""
        longest = 0.0
        for o in lanes:
            if o.name == lane.name or not o.is_busy:
                continue
            if o.is_remote or o.cost is None:
                return math.inf
            busy = o.cost.prefill_s(o.pending_prompt_tokens) if o.pending_prompt_tokens else 0.0
            if o.decode_batch:
                per_stream = (o.remaining_tokens / o.decode_batch
                              * o.cost.decode_step_s(o.decode_batch, o.mean_context))
                waiting = o.queue_depth if o.max_batch and o.decode_batch >= o.max_batch else 0
                busy += per_stream * (1 + waiting / o.decode_batch)
            longest = max(longest, busy)
        return longest

    def _contended_s(self, lane: LaneView, lanes: list[LaneView], seconds: float) -> float:
        """`seconds` of this lane's work alone, run beside the other lanes:
        slowed by its contention factor only while they stay busy with the
        work they hold (a short prefill beside a long decode slows a few of
        its steps, not all of them; charging all of them made the lane that
        the router had just given the prefill look faster than the GPU, and
        drew more work to it)."""
        factor = self._factor(lane, lanes)
        if factor == 1.0:
            return seconds
        overlap = self._others_busy_s(lane, lanes)
        if seconds * factor <= overlap:
            return seconds * factor
        return overlap + seconds - overlap / factor

    def _prefill(self, lane: LaneView, lanes: list[LaneView], tokens: int) -> tuple[float, float]:
        """(seconds until `tokens` more are prefilled here, delay imposed on its decodes)."""
        cost = self._cost(lane)
        backlog = lane.pending_prompt_tokens + tokens
        steps = math.ceil(backlog / max(lane.prefill_chunk, 1)) if lane.decode_batch else 0
        own = self._contended_s(lane, lanes, cost.prefill_s(backlog) + steps * cost.decode_step_s(
            lane.decode_batch, lane.mean_context))
        imposed = (lane.decode_batch * cost.prefill_s(tokens)
                   + self._waking(lane, lanes, own, prefill=True))
        return own, imposed

    def _decode(self, lane: LaneView, lanes: list[LaneView], tokens: int, context: float,
                joining: bool = True) -> tuple[float, float]:
        """(seconds to decode `tokens` here, delay imposed on the lane's other decodes)."""
        cost = self._cost(lane)
        others = lane.decode_batch - (0 if joining else 1)
        batch = others + 1
        ctx = (lane.mean_context * others + context) / batch
        alone = tokens * cost.decode_step_s(batch, ctx)
        own = self._contended_s(lane, lanes, alone)
        factor = own / alone if alone > 0 else 1.0  # the mean slowdown over these tokens
        shared = min(tokens, lane.remaining_tokens / others) if others else 0
        delta = cost.decode_step_s(batch, ctx) - cost.decode_step_s(others, ctx)
        imposed = others * shared * delta * factor
        if joining:
            imposed += self._waking(lane, lanes, own)
        return own, imposed

    def _waking(self, lane: LaneView, lanes: list[LaneView], seconds: float,
                prefill: bool = False) -> float:
        """Delay imposed by running `seconds` on `lane` while it is otherwise
        idle: every busy lane's decodes slow by that lane's contention factor
        (learned online, CostModel.observe; its prefill one for a prefill),
        for as long as both run."""
        if lane.is_busy:
            return 0.0  # already running: its effect is in the others' step times
        imposed = 0.0
        for other in lanes:
            if other.name != lane.name and other.decode_batch:
                oc = self._cost(other)
                their_s = other.remaining_tokens / other.decode_batch * oc.decode_step_s(
                    other.decode_batch, other.mean_context)
                c = self._cp(other, lanes) if prefill else self._c(other, lanes)
                imposed += other.decode_batch * min(seconds, their_s) * c
        return imposed

    @staticmethod
    def _rate(lane: LaneView, batch: float, context: float) -> float:
        """Decode tokens/s of `lane` carrying `batch` streams (beyond its batch
        slots the rest wait: no faster than a full batch)."""
        if lane.max_batch:
            batch = min(batch, lane.max_batch)
        if batch <= 0:
            return 0.0
        return batch / lane.cost.decode_step_s(batch, context)

    def _pays(self, lane: LaneView, lanes: list[LaneView], context: float,
              joining: bool = True) -> bool:
        """Does decoding on `lane` raise the machine's decode rate? With it,
        the lane carries its share of the decodes in flight (those waiting for
        a batch slot included) and every lane runs slowed by its contention;
        without it, the other lanes carry them all, uncontended, up to their
        batch slots. A lane that only takes turns with the others (two lanes
        on the same few cores), or takes decodes a batching GPU would carry
        almost free (its next stream costs a fraction of a step), does not
        pay; a CPU lane beside a full GPU usually does. The lane is judged at
        its share so that a batching lane is not starved before its batch
        can grow."""
        # Local lanes only: a remote decodes whole requests at its own rate
        # (its cost has no steps) and is weighed in `place` on its own.
        busy = [o for o in lanes if o.name != lane.name and not o.is_remote
                and (o.decode_batch or o.queue_depth)]
        if not busy or lane.is_remote:
            return True
        joined = 1 if joining else 0
        mine = lane.decode_batch + joined
        in_flight = sum(o.decode_batch + o.queue_depth for o in busy) + mine
        share = max(mine, math.ceil(in_flight / (len(busy) + 1)))
        ctx = (lane.mean_context * lane.decode_batch + context * joined) / max(mine, 1)
        weights = [max(o.decode_batch + o.queue_depth, 1) for o in busy]
        total = sum(weights)

        def others(carried: float, slowed: bool) -> float:
            return sum(self._rate(o, carried * w / total, o.mean_context or ctx)
                       / ((1 + self._c(o, lanes)) if slowed else 1.0)
                       for o, w in zip(busy, weights))

        with_lane = (self._rate(lane, share, ctx) / (1 + self._c(lane, lanes))
                     + others(in_flight - share, slowed=True))
        return with_lane > others(in_flight, slowed=False)

    def _prefill_pays(self, lane: LaneView, lanes: list[LaneView], tokens: int) -> bool:
        """Does prefilling `tokens` on `lane` save the machine time? While it
        runs, every busy lane loses c / (1 + c) of its time to contention
        (c its contention beside a prefill);
        that must be less than the time the fastest other lane would spend
        on the same prefill (a CPU lane that prefills a paste in 40 s while
        the GPU loses 7 s of its work to do what it does in 1 s does not)."""
        busy = [o for o in lanes if o.name != lane.name and o.is_busy and not o.is_remote]
        others = [o for o in lanes if o.name != lane.name and not o.is_remote]
        if not busy or not others or tokens <= 0:
            return True
        cost = self._cost(lane)
        seconds = cost.prefill_s(tokens) * (1 + self._c(lane, lanes))
        lost = sum(seconds * self._cp(o, lanes) / (1 + self._cp(o, lanes)) for o in busy)
        saved = min(self._cost(o).prefill_s(tokens) for o in others)
        return lost <= saved
