"""SIMULATION: a remote lane in virtual time, on the production code.

The director, the policy and the remote lane's `RemoteScheduler` (queue,
capacity, breaker, prefix memory, cost learned online from each answer) are
the engine's own; only the server is simulated: a continuous-batching server
whose first token comes `ttft_s(uncached)` after a request starts (round trip
included) and whose streams share its decode speed as
`stream_tps(n)` = decode_tps / (1 + batch_alpha (n - 1)) while n answers
decode at once (processor sharing, re-timed whenever n changes). It holds a
conversation's tokens from its last answer there (a prefix cache that never
evicts). Numbers from here are never measured speed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.director import Director
from ..core.remote import RemoteSpec
from ..core.remote_cost import RemoteCost
from ..core.remote_scheduler import RemoteScheduler
from ..core.request import Request


@dataclass(slots=True, frozen=True)
class SimRemoteSpec:
    name: str
    truth: RemoteCost  # the simulated server
    capacity: int = 4  # where the router's capacity starts


@dataclass(slots=True, eq=False)
class _Answer:
    request: Request
    started: float
    first_at: float
    tokens: int  # the answer's length
    left: float  # tokens still to stream after the first
    believed: int  # cached tokens the router believed it held
    cached: int  # cached tokens it really held
    concurrency: float = 0.0  # integral of n over its decode time
    last: float = 0.0


@dataclass(slots=True, eq=False)
class SimRemote:
    spec: SimRemoteSpec
    scheduler: RemoteScheduler
    director: Director
    answer_length: object  # Request -> its answer's length in tokens
    tokens: object  # (request, n) -> n synthetic output ids, the last the stop token
    active: list[_Answer] = field(default_factory=list)
    held: dict[str, list[int]] = field(default_factory=dict)  # what the server caches
    busy_s: float = 0.0
    last_t: float = 0.0

    @classmethod
    def build(cls, spec: SimRemoteSpec, director: Director, answer_length, tokens,
              clock) -> "SimRemote":
        remote = RemoteSpec("http://127.0.0.1/v1", "sim", name=spec.name,
                            capacity=spec.capacity)
        scheduler = RemoteScheduler(remote, director.lock, spec.truth.copy(), clock)
        scheduler.warming_up = False  # as after its probe, which measured the truth
        director.add_lane(scheduler)
        return cls(spec, scheduler, director, answer_length, tokens)

    @property
    def name(self) -> str:
        return self.spec.name

    def _decoding(self, now: float) -> list[_Answer]:
        return [a for a in self.active if a.first_at <= now]

    def advance(self, now: float) -> None:
        """Stream every decoding answer forward to `now`."""
        if self.active:
            self.busy_s += now - self.last_t
        decoding = self._decoding(self.last_t)
        rate = self.spec.truth.stream_tps(len(decoding)) if decoding else 0.0
        for answer in decoding:
            answer.left -= (now - self.last_t) * rate
            answer.concurrency += (now - self.last_t) * len(decoding)
        self.last_t = now

    def next_event(self) -> float:
        times = []
        decoding = self._decoding(self.last_t)
        rate = self.spec.truth.stream_tps(len(decoding)) if decoding else 0.0
        for answer in self.active:
            if answer.first_at > self.last_t:
                times.append(answer.first_at)
            else:
                times.append(self.last_t + max(answer.left, 0.0) / rate)
        return min(times, default=float("inf"))

    def fire(self, now: float) -> None:
        """First tokens and finished answers due at `now`."""
        for answer in list(self.active):
            request = answer.request
            if answer.first_at <= now and request.first_token_at is None:
                request.first_token_at = answer.first_at
            if answer.first_at <= now and answer.left <= 1e-6:
                self.active.remove(answer)
                self._finish(answer, now)

    def _finish(self, answer: _Answer, now: float) -> None:
        request, scheduler = answer.request, self.scheduler
        request.output_ids = self.tokens(request, answer.tokens)
        decode_s = now - answer.first_at
        n = answer.concurrency / decode_s if decode_s > 0 else 1.0
        scheduler.cost.observe(request.num_prompt - answer.cached, answer.first_at - answer.started,
                               answer.tokens, decode_s, n, total_s=now - answer.started)
        self.held[request.tab_id or ""] = request.all_ids
        request.cached_tokens = answer.cached
        scheduler.answered(request, request.all_ids, answer.cached, answer.believed, n, True)
        scheduler.done(request)
        self.director.finish(request, "stop", self.name)

    def dispatch(self, now: float) -> None:
        scheduler = self.scheduler
        while (request := scheduler.next_request()) is not None:
            held = self.held.get(request.tab_id or "", [])
            cached = 0
            while (cached < min(len(held), request.num_prompt - 1)
                   and held[cached] == request.prompt_ids[cached]):
                cached += 1
            tokens = max(self.answer_length(request), 1)
            first = now + self.spec.truth.ttft_s(request.num_prompt - cached)
            self.active.append(_Answer(request, now, first, tokens, tokens - 1.0,
                                       scheduler.held_for(request), cached, last=now))
