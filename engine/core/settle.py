"""After a step commits: its events, endings and hand-overs, in one order
for a real lane (engine/runtime/lane.py) and the simulator (engine/sim/).

The step's tokens leave as one `StepTokens` event, not one event per token:
the engine splits it into each request's `Token` events on its delivery
thread, off the lane thread (engine/engine.py). Text is streamed here, on
the lane, because a stop string ends its request at this step (and its
KV goes to the prefix cache now, not some steps later).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from .events import StepTokens, Token
from .request import Request
from .step import StepOutcome, StepPlan

if TYPE_CHECKING:
    from .scheduler import LaneScheduler


def settle(scheduler: "LaneScheduler", plan: StepPlan, outcome: StepOutcome,
           hand_over: Callable[[Request, str], bool],
           release: Callable[[list[Request]], None]) -> None:
    """Emit the plan's decisions, end cancelled requests, hand moved ones to
    their lane (`hand_over`: False if it refused), stream the step's text,
    end finished requests after `release` freed their device state."""
    director, lane = scheduler.director, scheduler.name
    for event in plan.events:
        director.emit(event)
    for request in plan.cancelled:
        director.finish(request, "cancelled", lane)
    for request, target in plan.moves:
        if not hand_over(request, target):
            director.finish(request, "cancelled", lane)
    reasons = {r.request_id: why for r, why in outcome.finished}
    stopped, tokens = [], []
    stop_ids = director.stop_token_ids
    t = director.clock()
    for request, token, reason, lp, drafted in outcome.tokens:
        stream = request.text
        if stream is None or token in stop_ids or request in stopped:
            continue  # a stop token is never shown
        text, reasoning = stream.add(token)
        tokens.append(Token(request.request_id, request.tab_id, token, text, lane, t,
                            reasoning=reasoning, logprob=lp[0] if lp else None,
                            top_logprobs=lp[1] if lp else (), tool_calls=stream.take_calls(),
                            drafted=drafted))
        if stream.stopped:  # a stop string: the answer ends here
            if reason is None:
                stopped.append(request)
            reasons[request.request_id] = "stop"
    if tokens:
        director.emit(StepTokens(lane, tuple(tokens), t))
    scheduler.finish(stopped)
    finished = [r for r, _ in outcome.finished] + stopped
    release(finished)
    for request in finished:
        reason = reasons[request.request_id]
        director.finish(request, reason, lane,
                        error=request.failure if reason == "error" else None)
