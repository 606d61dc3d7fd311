"""The director: routes requests between lane schedulers and ends them.

Plain Python shared by the engine and the simulator: it asks the policy where
a new request prefills, where a prefilled one decodes and whether a running
one should move; it hands moved requests to their new lane and emits every
request's single terminal `Finished` event. Lanes call it while planning,
never in the middle of running a step.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Callable

from .errors import EngineError
from .events import Finished, Migrated, Routed, Token, now
from .memory import format_bytes
from .request import Request, RequestStatus
from .reservation import OPEN_STEP, first_reservation, settle_limit
from .router import MODES, LaneView, Placement, Policy, RequestView, eligible_lanes

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from .scheduler import LaneScheduler


class Director:
    """Routing over the lanes' schedulers, one lock for all their state."""

    def __init__(self, policy: Policy, emit: Callable[[object], None], context_length: int,
                 stop_token_ids: set[int], mode: str = "hybrid",
                 clock: Callable[[], float] = now, expected_output: float = 200.0):
        self.policy = policy
        self.emit = emit
        self.context_length = context_length
        self.stop_token_ids = set(stop_token_ids)
        self.clock = clock
        self.lock = threading.RLock()
        self.lanes: dict[str, "LaneScheduler"] = {}
        self.expected_output = expected_output  # EMA of answer lengths, for the router
        self.router_s = 0.0  # time spent in routing decisions (for benchmarks)
        self.router_calls = 0
        self.mode = "hybrid"
        self.set_mode(mode)

    def add_lane(self, lane: "LaneScheduler") -> None:
        self.lanes[lane.name] = lane

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise EngineError(f"Unknown mode '{mode}' (expected one of {', '.join(MODES)}).",
                              "bad-argument")
        self.mode = mode

    # ---- views --------------------------------------------------------------
    def expected_left(self, request: Request) -> int:
        left = min(request.params.max_tokens, int(self.expected_output)) - request.num_output
        return max(left, 16)

    def request_view(self, request: Request) -> RequestView:
        remote = {name: lane.held_for(request) for name, lane in self.lanes.items()
                  if lane.kind == "remote"}
        return RequestView(request.request_id, request.num_prompt, request.cached_tokens,
                           self.expected_left(request), request.num_output, request.tab_id,
                           request.num_output - request.output_at_last_move, remote)

    def views(self, fits: Callable[["LaneScheduler"], bool] = lambda lane: True,
              keep: str | None = None) -> list[LaneView]:
        """The open lanes the mode allows and `fits` accepts (`keep` always stays).
        A lane still warming up (calibrating) is left out while another is ready:
        a slow start-up (a GPU compiling its kernels) is routed around, not waited for."""
        open_lanes = [lane for lane in self.lanes.values() if lane.is_open]
        views = eligible_lanes(self.mode, [lane.view(self.expected_left) for lane in open_lanes])
        warming = {lane.name for lane in open_lanes if lane.warming_up}
        if any(v.name not in warming for v in views):  # the mode's lanes: one is ready
            views = [v for v in views if v.name not in warming or v.name == keep]
        return [v for v in views if v.name == keep or fits(self.lanes[v.name])]

    def others_busy(self, name: str, local: bool = False) -> bool:
        """Whether another lane has work (`local`: another local lane). A
        remote lane counts: a lane learns how much the others slow it, and a
        remote served from this same machine does (one elsewhere learns ~0)."""
        return any(not lane.is_idle for other, lane in self.lanes.items()
                   if other != name and not (local and lane.kind == "remote"))

    def others_prefilling(self, name: str) -> bool:
        """Whether another lane's steps carry prompt chunks."""
        return any(getattr(lane, "is_prefilling", False) for other, lane in self.lanes.items()
                   if other != name)

    def _decide(self, ask: Callable[[], Placement | None]) -> Placement | None:
        started = time.perf_counter()
        try:
            return ask()
        finally:
            self.router_s += time.perf_counter() - started
            self.router_calls += 1

    # ---- decisions ------------------------------------------------------------
    def place(self, request: Request, local_only: bool = False,
              why: str = "") -> tuple["LaneScheduler", Routed]:
        """The lane that prefills a new request, and the decision as an event.
        `local_only`: a request a remote lane gave back (it failed or refused
        it) goes to a local lane; `why` then leads the decision's reason.

        Raises EngineError when no open lane could ever hold its KV."""
        settle_limit(request, self.context_length)
        request.kv_tokens = first_reservation(request, self.context_length)
        # Logprobs and grammars come from a local lane's forward pass; a
        # remote lane does not do them (yet), so such a request stays here.
        local_only = local_only or (request.params.needs_local_lane
                                    and request.messages is None) or request.vision is not None
        with self.lock:
            views = [v for v in self.views(lambda lane: lane.fits_alone(request))
                     if not (local_only and v.is_remote)]
            if not views:
                raise self._never_fits(request)
            placement = self._decide(lambda: self.policy.place(self.request_view(request), views))
        event = Routed(request.request_id, request.tab_id, phase="prefill", lane=placement.lane,
                       reason=f"{why}; {placement.reason}" if why else placement.reason,
                       predicted_s=placement.predicted_s, cached_tokens=request.cached_tokens,
                       time=self.clock(), predicted_done_s=placement.predicted_done_s,
                       left_idle=placement.left_idle)
        return self.lanes[placement.lane], event

    def cancel_waiting(self, request: Request) -> bool:
        """End a cancelled request at once if it has not started (it waits in a
        lane's queue: no device state; that lane may still be warming up and
        plan nothing for a while). False: the lane ends it at its next step."""
        with self.lock:
            lane = self.lanes.get(request.lane or "")
            if lane is None or request not in lane.waiting:
                return False
            lane.waiting.remove(request)
        self.finish(request, "cancelled", lane.name)
        return True

    def reroute_waiting(self, source: str) -> list[tuple[str, Routed]]:
        """Requests queued on `source` (still warming up, or failed at start-up)
        that have not started go to a ready lane, if the mode has one: a lane
        that warms up first serves what queued while none was ready. Returns
        (lane, event) per request moved; the caller emits and wakes."""
        moved = []
        with self.lock:
            lane = self.lanes[source]
            if not (lane.warming_up or not lane.is_open):
                return moved
            keep = []
            while lane.waiting:
                request = lane.waiting.popleft()
                views = [v for v in self.views(lambda other: other.fits_alone(request))
                         if v.name != source and not self.lanes[v.name].warming_up]
                if request.is_cancelled or not views:
                    keep.append(request)
                    continue
                placement = self._decide(
                    lambda: self.policy.place(self.request_view(request), views))
                target = self.lanes.get(placement.lane)
                if (placement.lane not in {v.name for v in views}  # a policy that insists
                        or target is None or not target.enqueue(request)):
                    keep.append(request)
                    continue
                why = "failed" if not lane.is_open else "still warming up"
                moved.append((target.name, Routed(
                    request.request_id, request.tab_id, phase="prefill", lane=target.name,
                    reason=f"{placement.reason} (re-routed: {source.upper()} lane {why})",
                    predicted_s=placement.predicted_s, cached_tokens=request.cached_tokens,
                    time=self.clock())))
            lane.waiting.extend(keep)
        return moved

    def _never_fits(self, request: Request) -> EngineError:
        open_lanes = [lane for lane in self.lanes.values()
                      if lane.is_open and lane.kind != "remote"]
        if not open_lanes:
            why = "; ".join(f"{lane.name}: {lane.failed or 'closed'}"
                            for lane in self.lanes.values() if lane.kind != "remote")
            return EngineError(f"No lane can run requests ({why}).", "lane-failed")
        lane = max(open_lanes, key=lambda lane: lane.kv_budget_bytes or 0)
        need = lane.kv_bytes_for([request])
        what, fix = ((f"prompt + the first {OPEN_STEP} of its answer", "Shorten")
                     if request.open_ended else ("prompt + max_tokens",
                                                 "Lower max_tokens or shorten"))
        return EngineError(
            f"This request needs up to {format_bytes(need)} of KV cache "
            f"({request.kv_tokens} tokens: {what}), more than any lane can hold "
            f"(at most {format_bytes(lane.kv_budget_bytes or 0)}). {fix} "
            f"the conversation.", "too-large-for-memory")

    def place_decode(self, request: Request, current: str) -> tuple[str, object]:
        """Where a request whose prefill ended on `current` decodes (under the lock)."""
        views = self.views(lambda lane: lane.can_take(request), keep=current)
        placement = self._decide(
            lambda: self.policy.place_decode(self.request_view(request), current, views))
        if placement.lane == current:
            return current, Routed(request.request_id, request.tab_id, phase="decode",
                                   lane=current, reason=placement.reason,
                                   predicted_s=placement.predicted_s,
                                   cached_tokens=request.cached_tokens, time=self.clock(),
                                   left_idle=placement.left_idle)
        return placement.lane, self._migrated(request, current, placement)

    def reconsider(self, request: Request, current: str) -> tuple[str | None, object]:
        """Between steps: a lane to move a decoding request to (under the lock)."""
        views = self.views(lambda lane: lane.can_take(request), keep=current)
        placement = self._decide(
            lambda: self.policy.reconsider(self.request_view(request), current, views))
        if placement is None or placement.lane == current:
            return None, None
        return placement.lane, self._migrated(request, current, placement)

    def _migrated(self, request: Request, current: str, placement: Placement) -> Migrated:
        return Migrated(request.request_id, request.tab_id, from_lane=current,
                        to_lane=placement.lane, reason=placement.reason,
                        predicted_s=placement.predicted_s, time=self.clock())

    # ---- hand-offs and endings -------------------------------------------------------
    def hand_over(self, request: Request, target: str) -> bool:
        """Give a moved request to `target`'s scheduler; False if it is shut."""
        lane = self.lanes.get(target)
        return lane is not None and lane.adopt(request)

    def finish(self, request: Request, reason: str, lane: str | None = None,
               error: str | None = None) -> None:
        """End a request with exactly one `Finished` (later calls do nothing)."""
        with self.lock:
            if request.status is RequestStatus.FINISHED:
                return
            request.status = RequestStatus.FINISHED
            request.finish_reason = reason
            output = request.num_output + request.carried
            if reason in ("stop", "length") and output:
                self.expected_output += 0.2 * (output - self.expected_output)
        try:
            self._announce_end(request, reason, lane, error)
        except Exception as exc:  # a bug reading its text: still exactly one Finished
            logger.exception("Finishing request %s failed", request.request_id)
            self.emit(Finished(
                request.request_id, request.tab_id, reason="error", text="",
                prompt_tokens=request.num_prompt, cached_tokens=0,
                output_tokens=request.num_output, ttft_s=None, time_per_output_token_s=None,
                e2e_s=self.clock() - request.submitted_at, lanes=tuple(request.lane_history),
                error=f"Internal error while finishing the answer: {exc!r}"))

    def _announce_end(self, request: Request, reason: str, lane: str | None,
                      error: str | None) -> None:
        """The request's last Token (the text held back) and its Finished."""
        stream, request.text = request.text, None
        tail, thought = (stream.finish() if stream is not None
                         and reason not in ("cancelled", "error") else ("", ""))
        calls = stream.take_calls() if stream is not None else ()
        # max_tokens (or the context) ended the answer inside a call: it is cut.
        cut = reason == "length" and stream is not None and stream.ended_in_call
        if tail or thought or calls:
            self.emit(Token(request.request_id, request.tab_id, -1, tail, lane or "",
                            self.clock(), reasoning=thought, tool_calls=calls,
                            cut_call=cut and bool(calls)))
        end = self.clock()
        first = request.first_token_at
        tpot = ((end - first) / (request.num_output - 1)
                if first is not None and request.num_output > 1 else None)
        drafts = request.drafts
        self.emit(Finished(
            request.request_id, request.tab_id, reason=reason,
            text=stream.text if stream is not None else "",
            prompt_tokens=request.num_prompt - request.carried,
            cached_tokens=min(request.cached_tokens, request.num_prompt - request.carried),
            output_tokens=request.num_output + request.carried,
            ttft_s=first - request.submitted_at if first is not None else None,
            time_per_output_token_s=tpot, e2e_s=end - request.submitted_at,
            lanes=tuple(request.lane_history), error=error, time=end,
            prefix_note=request.prefix_note,
            restored_tokens=request.restored_tokens, restore_s=request.restore_s,
            reasoning=stream.reasoning if stream is not None else "",
            tool_calls=tuple(stream.tool_calls) if stream is not None else (),
            cut_call=cut,
            stop_sequence=stream.stop_hit if stream is not None else None,
            drafted=drafts.policy.drafted if drafts is not None else 0,
            accepted_drafts=drafts.policy.accepted if drafts is not None else 0,
            draft_note=drafts.reason if drafts is not None else None))
