"""The engine's remote lanes: added and removed at run time, routed by the
same director as the local lanes when they serve the loaded model, and the
way back to a local lane when one fails mid-answer (`continue_locally`).

Kept apart from engine.py, which owns the local lanes; the engine calls in
here for its public `add_remote` / `remove_remote` and for cancel, close,
samples and the lane descriptions. What the engine does in return it gives
as callbacks (`emit`, `on_change`, `on_routed`); the rest is its public API.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Callable

from .core.errors import EngineError
from .core.events import LaneSample
from .core.laneconfig import LaneInfo
from .core.remote import RemoteSpec
from .core.request import RequestStatus
from .remote.io import RemoteIO
from .remote.lane import RemoteLane


class Remotes:
    def __init__(self, engine, emit: Callable[[object], None],
                 on_change: Callable[[RemoteLane], None], on_routed: Callable[[], None]):
        """`engine`: the Engine (engine.py) that owns this, for its public
        names (lanes, director, tokenizer, render). `emit`: its events out.
        `on_change(lane)`: a remote's probe ended or it went down (the engine
        moves queued requests to a ready lane and wakes who waits for lanes).
        `on_routed()`: a remote is routed (the engine may become hybrid)."""
        self.engine = engine
        self._emit, self._on_change, self._on_routed = emit, on_change, on_routed
        self.lanes: dict[str, RemoteLane] = {}  # routed: they serve the loaded model
        self.unrouted: dict[str, tuple[RemoteSpec, str]] = {}  # name -> (spec, why not)
        self._io: RemoteIO | None = None
        self._lock = threading.Lock()
        self._last: dict[str, tuple[int, float]] = {}

    def local_names(self) -> set[str]:
        info = self.engine.model_info
        names = {getattr(info, "name", "") or ""}
        if getattr(info, "source", "") == "default":
            names.add("default")
        return names - {""}

    def add(self, spec: RemoteSpec, api_key: str | None = None) -> RemoteLane | None:
        """Add a remote lane; it is routed to once its probe answered. A
        remote serving another model is kept, not routed (`unrouted` says why)."""
        engine = self.engine
        with self._lock:
            taken = set(engine.lanes) | set(self.lanes) | set(self.unrouted)
            if spec.name in taken:
                raise EngineError(f"There is already a lane named {spec.name!r}.",
                                  "bad-argument")
            names = self.local_names()
            if spec.model and not spec.routes_for(names):
                self.unrouted[spec.name] = (spec, (
                    f"not routed: it serves {spec.serves_model or 'an unnamed model'!r}, "
                    f"not the loaded {sorted(names)[0]!r} (say which local model it serves "
                    "to route to it, or use it as the model: Engine > Remote lanes…)"))
                return None
            if self._io is None:
                self._io = RemoteIO()
            tokenizer = engine.tokenizer
            lane = RemoteLane(
                spec, api_key, engine.director, self._io,
                encode=lambda text: list(tokenizer.encode(
                    text, add_special_tokens=False, split_special_tokens=True)),
                decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=False),
                probe_ids=engine.render([{"role": "user", "content": "Say hello."}]),
                give_back=self.continue_locally, on_change=self._on_change,
                local_names=names)
            self.lanes[spec.name] = lane
            engine.director.add_lane(lane.scheduler)
        self._on_routed()
        lane.start()
        return lane

    def remove(self, name: str) -> None:
        """Stop routing to it; its requests in flight end cancelled."""
        with self._lock:
            self.unrouted.pop(name, None)
            lane = self.lanes.pop(name, None)
        if lane is None:
            return
        with self.engine.director.lock:
            lane.scheduler.close()
            self.engine.director.lanes.pop(name, None)
        lane.close(hand_back=True)  # its requests go on locally, from what they had

    def continue_locally(self, request, received: str, why: str) -> None:
        """A remote failed or refused the request: a local lane goes on from
        the text it streamed (appended to the prompt, still counted as output)."""
        engine, director = self.engine, self.engine.director
        if request.is_finished:
            return
        budget = request.params.max_tokens  # what is left of it (lowered at each hand-back)
        ids = list(engine.tokenizer.encode(received, add_special_tokens=False,
                                           split_special_tokens=True)) if received else []
        # The lane already cut the text at max_tokens; the count is bounded
        # here too, so a request never counts more output than it allowed.
        ids = ids[:budget]
        if ids:
            if request.text is not None:
                request.text.resume(ids)
            request.prompt_ids = request.prompt_ids + ids
            request.carried += len(ids)
            if len(ids) >= budget:
                director.finish(request, "length", request.lane)
                return
            request.params = dataclasses.replace(
                request.params, max_tokens=request.params.max_tokens - len(ids))
        request.output_ids = []
        request.status = RequestStatus.WAITING
        if request.num_prompt >= engine.context_length:
            director.finish(request, "length", request.lane)
            return
        request.cached_tokens = engine.prefix_cache.cached_length(
            request.prompt_ids, limit=request.num_prompt - 1)
        if received:
            why += f"; goes on here from the {len(ids)} tokens received"
        try:
            lane, event = director.place(request, local_only=True, why=why)
        except EngineError as e:
            director.finish(request, "error", request.lane, error=f"{why}; {e}")
            return
        self._emit(event)
        if lane.enqueue(request):
            engine.lane(lane.name).wake()
        else:
            director.finish(request, "error", lane.name, error=lane.failed or "closed")

    def cancel(self, request) -> None:
        lane = self.lanes.get(request.lane or "")
        if lane is not None:
            lane.cancel(request.request_id)

    def close(self) -> None:
        with self._lock:
            lanes = list(self.lanes.values())
        for lane in lanes:
            lane.close()
        if self._io is not None:
            self._io.stop()

    def info(self) -> list[LaneInfo]:
        out = [LaneInfo(lane.name, "remote", "remote", lane.failed, lane.phase)
               for lane in self.lanes.values()]
        out += [LaneInfo(name, "remote", "remote", why, "not routed")
                for name, (_, why) in self.unrouted.items()]
        return out

    def describe(self) -> dict[str, str]:
        lines = {name: lane.describe() for name, lane in self.lanes.items()}
        lines.update({name: f"REMOTE {spec.model or 'model'} at {spec.host}: {why}"
                      for name, (spec, why) in self.unrouted.items()})
        return lines

    def samples(self, prefix_bytes: int) -> list[LaneSample]:
        return remote_samples(self.lanes, self._last, time.perf_counter(), prefix_bytes)


def remote_samples(lanes: dict[str, RemoteLane], last: dict, t: float,
                   prefix_bytes: int = 0) -> list[LaneSample]:
    """A sample per remote lane: busy is the share of its capacity in use;
    tokens/s counts the chunks it streamed (a token each, on most servers)."""
    out = []
    for name, lane in list(lanes.items()):
        scheduler = lane.scheduler
        tokens, t0 = last.get(name, (scheduler.output_tokens, t))
        last[name] = (scheduler.output_tokens, t)
        dt = max(t - t0, 1e-6)
        out.append(LaneSample(
            lane=name, device="remote",
            busy_fraction=min(1.0, scheduler.batch_size / max(scheduler.capacity, 1)),
            tokens_per_s=(scheduler.output_tokens - tokens) / dt if t > t0 else 0.0,
            batch_size=scheduler.batch_size, queue_depth=scheduler.queue_depth,
            kv_bytes=0, prefix_cache_bytes=prefix_bytes, phase=lane.phase))
    return out
