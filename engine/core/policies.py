"""The cost-aware router (the reference warm-prefix rule: warm_prefix.py).
Plain Python over `LaneView` / `RequestView` snapshots."""

from __future__ import annotations

import math

from .lane_predictions import LanePredictions
from .router import LaneView, Placement, RequestView, _stay
from .warm_prefix import WarmPrefixPolicy  # noqa: F401  (the reference rule, named here too)

GPU_ONLY_POLICY = "gpu-only"
FALLBACK_MARGIN = 0.15  # how much faster alone a lane must be to take a GPU lane's decodes
# How much better a plan that takes a phase off a busy GPU lane must score than
# the whole request on it, while the contention between them is not known yet
# (nothing learned or stored: the plan's gain rests on a guess of 0).
UNCERTAIN_MARGIN = 0.1


class CostAwarePolicy(LanePredictions):
    """Place each phase where it adds the least time to the system.

    For every (prefill lane, decode lane) pair it predicts the request's own
    completion time from the lanes' cost models, queues and batches, and adds
    the delay it imposes on requests already there (a larger decode batch makes
    each of their steps longer; prefill chunks stall their decodes; starting
    an idle lane slows the busy ones by the contention factor). The cheapest
    pair wins. When a prefill ends, the decode lane is chosen again; between
    steps a decoding request moves when another lane would finish it clearly
    sooner (hysteresis keeps requests from bouncing).
    """

    name = "cost-aware"

    def __init__(self, migrate_gain: float = 0.05, migrate_min_s: float = 0.1,
                 migration_s: float = 0.0, min_tokens_between_moves: int = 32,
                 imposed_weight: float = 1.0, sticky_margin: float = 0.1):
        self.migrate_gain = migrate_gain
        self.migrate_min_s = migrate_min_s
        self.migration_s = migration_s
        self.min_tokens_between_moves = min_tokens_between_moves
        self.imposed_weight = imposed_weight  # how much others' delay counts vs own time
        # A conversation a remote holds cached stays there unless another lane
        # is predicted this much faster (its prefix cache stays warm).
        self.sticky_margin = sticky_margin

    def _decode_lanes(self, lanes: list[LaneView], context: float,
                      current: str | None = None) -> list[LaneView]:
        """The lanes worth decoding on. Where none pays beside the others (two
        lanes that only take turns on the same cores), the one lane that
        carries every decode in flight fastest on its own: the others drain
        into it, never it into them. A GPU lane keeps them unless the others
        are predicted clearly faster (FALLBACK_MARGIN), also where they pay
        beside each other but not beside it: where the models are uncertain,
        hybrid does what GPU-only does (a paced CPU lane's model, believed
        5-10% faster at a batch of 3-4, took every decode and was 6% slower
        for real; once it held them, the GPU "did not pay" beside it)."""
        paying = [d for d in lanes
                  if self._pays(d, lanes, context, joining=d.name != current)]
        local = [d for d in lanes if not d.is_remote]
        if not local:
            return paying or lanes
        in_flight = sum(d.decode_batch + d.queue_depth for d in local) + (current is None)

        def rate(d: LaneView, streams: float = in_flight) -> float:
            return self._rate(d, streams, d.mean_context or context)

        gpus = [d for d in local if d.device == "gpu"]
        gpu = max(gpus, key=rate) if gpus else None
        if paying and (gpu is None or any(d.device == "gpu" for d in paying)):
            return paying
        if paying:  # a GPU left idle while others decode: only if clearly faster
            share = in_flight / len(paying)
            together = (rate(paying[0]) if len(paying) == 1 else
                        sum(rate(d, share) / (1 + self._c(d, lanes)) for d in paying))
            return [gpu] if together < rate(gpu) * (1 + FALLBACK_MARGIN) else paying
        fastest = max(local, key=rate)
        if gpu is not None and rate(fastest) < rate(gpu) * (1 + FALLBACK_MARGIN):
            return [gpu]
        return [fastest]

    def _left_idle(self, lanes: list[LaneView],
                   kept: list[LaneView]) -> tuple[tuple[str, str], ...]:
        """(lane, why) for each lane the pays test kept out: ("cpu", "it would
        slow GPU more than it adds (contention 0.2)")."""
        names = {d.name for d in kept}
        out = []
        for d in lanes:
            if d.name not in names:
                others = ", ".join(o.name.upper() for o in lanes
                                   if o.name != d.name and o.is_busy) or "the others"
                out.append((d.name, f"it would slow {others} more than it adds "
                                    f"(contention {self._c(d, lanes):.1f})"))
        return tuple(out)

    @staticmethod
    def _said(left_idle: tuple[tuple[str, str], ...]) -> str:
        """'; CPU left idle: it would slow GPU ...' for the reason text."""
        return "".join(f"; {name.upper()} left idle: {why}" for name, why in left_idle)

    # ---- decisions ----------------------------------------------------------
    def _remote(self, lane: LaneView, request: RequestView,
                lanes: list[LaneView]) -> tuple[float, float]:
        """(seconds until a remote lane finishes the request, delay it imposes
        on our requests already there). A full remote queues it behind the
        answers in flight; each stream there slows a little as it joins."""
        cost = lane.cost
        uncached = request.prompt_tokens - request.remote_cached.get(lane.name, 0)
        capacity = max(lane.capacity, 1)
        busy = lane.batch_size + lane.queue_depth
        wait = (busy - capacity + 1) / capacity * cost.mean_request_s if busy >= capacity else 0.0
        n = min(busy + 1, capacity)
        own = wait + cost.request_s(uncached, request.expected_output, n)
        imposed = 0.0
        if lane.batch_size and busy < capacity:
            shared = min(request.expected_output, lane.remaining_tokens / lane.batch_size)
            delta = 1 / cost.stream_tps(n) - 1 / cost.stream_tps(n - 1)
            imposed = lane.batch_size * shared * delta
        # Waking an idle remote slows the busy local lanes by their learned
        # contention (a server on this machine shares its cores).
        return own, imposed + self._waking(lane, lanes, own)

    @staticmethod
    def _uncertain(gpu: LaneView, lane: LaneView) -> bool:
        """Is the contention between a busy GPU lane and `lane` still a guess
        (neither learned from enough steps side by side nor stored by an
        earlier run), so that work placed on `lane` may cost the GPU's
        decodes what no prediction says? (A CPU lane prefilling beside the
        GPU's decodes on two shared cores, believed free, lost 1.5-3%.)"""
        if not gpu.is_busy or lane.is_remote:
            return False
        g, o = gpu.cost, lane.cost
        return not (g.contention_known and g.prefill_contention_known and o.contention_known)

    def _local_plan(self, request: RequestView, lanes: list[LaneView], own_by_lane: dict):
        """The cheapest (prefill lane, decode lane) pair of local lanes:
        (score, own seconds, prefill lane, decode lane, lanes left idle).
        A plan that puts a phase off the GPU lane where their contention is
        not known yet must beat the whole request on the GPU by
        UNCERTAIN_MARGIN (hysteresis where predictions are uncertain)."""
        uncached = request.uncached_tokens
        context = request.prompt_tokens
        best, best_score = None, math.inf
        gpus = [lane for lane in lanes if lane.device == "gpu"]
        gpu = gpus[0] if len(gpus) == 1 else None
        on_gpu = None  # (score, plan) of the whole request on the GPU lane
        paying = self._decode_lanes(lanes, context)
        decode_lanes = {d.name for d in paying}
        prefill_lanes = ({p.name for p in lanes if self._prefill_pays(p, lanes, uncached)}
                         or {p.name for p in lanes})
        for p in lanes:
            pre_own, pre_imposed = self._prefill(p, lanes, uncached)
            for d in lanes:
                dec_own, dec_imposed = self._decode(d, lanes, request.expected_output, context)
                move = self.migration_s if d.name != p.name else 0.0
                own = pre_own + move + dec_own
                score = own + self.imposed_weight * (pre_imposed + dec_imposed)
                if p.name == d.name:
                    own_by_lane[p.name] = own
                    if gpu is not None and p.name == gpu.name:
                        on_gpu = (score, (p, d, own))
                # A prefill on a lane that does not pay for it is worth it only
                # where the request then decodes (it spares the queue elsewhere).
                if d.name not in decode_lanes or (p.name != d.name
                                                  and p.name not in prefill_lanes):
                    continue
                if score < best_score:
                    best, best_score = (p, d, own), score
        p, d, own = best
        idle = self._left_idle(lanes, paying)
        if (on_gpu is not None and on_gpu[0] > 0 and gpu.name in decode_lanes
                and (p.name, d.name) != (gpu.name, gpu.name)):
            off = p if p.name != gpu.name else d
            if self._uncertain(gpu, off) and best_score > on_gpu[0] * (1 - UNCERTAIN_MARGIN):
                gain = 1 - best_score / on_gpu[0]
                best_score, (p, d, own) = on_gpu
                why = (f"the {gain:.0%} it would gain is within what its contention with "
                       f"{gpu.name.upper()}, not known yet, may cost")
                listed = [i for i, (name, _) in enumerate(idle) if name == off.name]
                if listed:  # one entry a lane: both reasons
                    idle = tuple((n, f"{w}; {why}" if n == off.name else w) for n, w in idle)
                else:
                    idle += ((off.name, why),)
        return best_score, own, p, d, idle

    def place(self, request: RequestView, lanes: list[LaneView]) -> Placement:
        if len(lanes) == 1:
            lane = lanes[0]
            return Placement(lane.name, f"only lane allowed ({lane.device.upper()})",
                             decode_lane=lane.name)
        local = [lane for lane in lanes if not lane.is_remote]
        if any(lane.cost is None for lane in lanes):
            from .router import LeastLoadedPolicy
            return LeastLoadedPolicy().place(request, lanes)
        own_by_lane: dict[str, float] = {}
        best, idle = None, ()
        if local:
            score, own, p, d, idle = self._local_plan(request, local, own_by_lane)
            best = (score, own, p, d)
        sticky = ""
        for r in (lane for lane in lanes if lane.is_remote):
            own, imposed = self._remote(r, request, lanes)
            own_by_lane[r.name] = own
            score = own + self.imposed_weight * imposed
            held = request.remote_cached.get(r.name, 0)
            if held:
                score *= 1 - self.sticky_margin
            if best is None or score < best[0]:
                best = (score, own, r, r)
                sticky = (f"; {r.name.upper()} holds {held}/{request.prompt_tokens} of this "
                          "chat's tokens" if held else "")
        _, own, p, d = best
        warm = f"{request.cached_tokens}/{request.prompt_tokens} tokens cached"
        times = " vs ".join(f"{n.upper()} {t:.1f} s" for n, t in own_by_lane.items())
        plan = p.name.upper() if p.name == d.name else f"{p.name.upper()} -> decode {d.name.upper()}"
        idle = idle if not p.is_remote else ()
        reason = (f"{warm}{sticky}; {plan} done in {own:.1f} s (all on one lane: {times})"
                  + self._said(idle))
        return Placement(p.name, reason, predicted_s=own_by_lane, decode_lane=d.name,
                         predicted_done_s=own, left_idle=idle)

    def place_decode(self, request: RequestView, current: str,
                     lanes: list[LaneView]) -> Placement:
        if (len(lanes) == 1 or current not in {lane.name for lane in lanes}
                or any(lane.cost is None for lane in lanes)):
            return _stay(current, lanes)
        context = request.prompt_tokens + request.output_tokens
        scored = {}
        paying = self._decode_lanes(lanes, context)
        for d in paying:
            own, imposed = self._decode(d, lanes, request.expected_output, context)
            move = self.migration_s if d.name != current else 0.0
            scored[d.name] = (own + move + self.imposed_weight * imposed, own + move)
        choice = min(scored, key=lambda n: scored[n][0])
        times = " vs ".join(f"{n.upper()} {v[1]:.1f} s" for n, v in scored.items())
        idle = self._left_idle(lanes, paying)
        return Placement(choice, f"decode {request.expected_output} tokens: {times}"
                         + self._said(idle), predicted_s={n: v[1] for n, v in scored.items()},
                         left_idle=idle)

    def reconsider(self, request: RequestView, current: str,
                   lanes: list[LaneView]) -> Placement | None:
        names = {lane.name for lane in lanes}
        if current not in names:
            return _stay(current, lanes)
        if (len(lanes) == 1 or request.expected_output < self.min_tokens_between_moves
                or request.tokens_since_move < self.min_tokens_between_moves
                or any(lane.cost is None for lane in lanes)):
            return None
        context = request.prompt_tokens + request.output_tokens
        here = next(lane for lane in lanes if lane.name == current)
        stay_own, stay_imposed = self._decode(here, lanes, request.expected_output, context,
                                              joining=False)
        stay = stay_own + self.imposed_weight * stay_imposed
        best = None
        worth = self._decode_lanes(lanes, context, current)
        if here.name not in {d.name for d in worth}:
            stay = math.inf  # this lane costs the others more than it adds: drain it
        for d in worth:
            if d.name == current:
                continue
            own, imposed = self._decode(d, lanes, request.expected_output, context)
            total = own + self.imposed_weight * imposed + self.migration_s
            if total < stay * (1 - self.migrate_gain) and stay - total > self.migrate_min_s:
                if best is None or total < best[1]:
                    best = (d, total, own)
        if best is None:
            return None
        d, _, own = best
        return Placement(d.name, f"{d.name.upper()} finishes the remaining "
                         f"{request.expected_output} tokens in {own:.1f} s vs "
                         f"{stay_own:.1f} s on {current.upper()}",
                         predicted_s={current: stay_own, d.name: own})


def make_policy(name: str):
    from .router import LeastLoadedPolicy

    policies = {"cost-aware": CostAwarePolicy, "warm-prefix": WarmPrefixPolicy,
                "least-loaded": LeastLoadedPolicy}
    if name not in policies:
        raise ValueError(f"unknown policy {name!r}; expected one of {sorted(policies)}")
    return policies[name]()
