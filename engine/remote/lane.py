"""A remote lane: sends whole requests to an OpenAI-compatible server and
streams its text back as the request's tokens.

Its queue, capacity, breaker and cost are the core's `RemoteScheduler`; this
runs them on the engine's asyncio loop (engine/remote/io.py). The prompt goes
as token ids (the remote serves the same model), or as text to a server that
refuses ids. When the remote fails mid-answer the request is given back to
the engine (`give_back`) with the text received so far, and a local lane
goes on from there: nothing shown is lost or repeated. What one answer is
sent with and what its stream said: answer.py.

What the remote says is bounded here (engine/core/remote_limits.py): its
text stops at max_tokens (finish "length"), its counts are clamped before
use, each request has an overall deadline, and every fault passes through
`_fault`, which scrubs the API key from its text.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Callable

from ..core.director import Director
from ..core.events import EngineErrorEvent, Token
from ..core.laneconfig import SchedulerState
from ..core.remote import RemoteSpec
from ..core.remote_cost import RemoteCost
from ..core.remote_limits import (OutputBudget, bound_prompt_tokens, request_deadline_s,
                                  scrub)
from ..core.remote_scheduler import RemoteScheduler
from ..core.request import Request
from .answer import Answer, probe_params, request_body
from .client import RemoteFault, list_models, make_client, stream_completion
from .io import RemoteIO
from .prompt_form import TEXT_ONLY, refused_ids

CHARS_PER_TOKEN_LIMIT = 64  # more text than this per allowed token is garbage
PERMANENT = ("auth", "model")


class RemoteLane(SchedulerState):
    device = kind = "remote"

    def __init__(self, spec: RemoteSpec, api_key: str | None, director: Director,
                 io: RemoteIO, encode: Callable[[str], list[int]] | None,
                 decode: Callable[[list[int]], str] | None, probe_ids: list[int],
                 give_back: Callable[[Request, str, str], None],
                 on_change: Callable[["RemoteLane"], None], cost: RemoteCost | None = None,
                 local_names: set[str] | None = frozenset(),
                 probe_messages: list | None = None):
        self.spec = spec
        self.name = spec.name
        self.model = spec.model
        self._key = api_key  # never logged, never in a message
        self.director = director
        self.io = io
        self.encode = encode
        self.decode = decode
        self.probe_ids = probe_ids
        self.give_back = give_back
        self.on_change = on_change  # its state changed: the engine re-routes its queue
        self.scheduler = RemoteScheduler(spec, director.lock, cost, director.clock)
        # The loaded model's names (None: it is the model, engine/remote_model.py).
        self.local_names = set(local_names) if local_names is not None else None
        self.probe_messages = probe_messages  # a chat probe, for a remote model
        self.prompt_as_ids = spec.url not in TEXT_ONLY  # until it refuses ids (prompt_form.py)
        self._client = None
        self._tasks: dict[str, asyncio.Task] = {}
        self._closing = False
        self._handing_back = False  # removed, not closed: its requests go on locally
        self._received: dict[str, str] = {}  # request id -> text streamed so far
        self._probe: asyncio.Task | None = None  # the start-up probe, while it runs
        self.ready = threading.Event()  # its probe ended (serving, down or failed)

    # ---- what the engine, the router and the dock read (and SchedulerState's) ------
    @property
    def phase(self) -> str:
        scheduler = self.scheduler
        if scheduler.failed:
            return "failed"
        if scheduler.warming_up:
            return "connecting"
        return {"closed": "serving", "open": "down", "half-open": "retrying"}[
            scheduler.breaker.state]

    def describe(self) -> str:
        return self.scheduler.describe(self.model)

    # ---- from any thread -----------------------------------------------------------
    def start(self) -> None:
        self.io.submit(self._start())

    def wake(self) -> None:
        self.io.call(self._dispatch)

    def cancel(self, request_id: str) -> None:
        self.io.call(self._cancel, request_id)

    def close(self, timeout: float = 10.0, hand_back: bool = False) -> None:
        """Stop; the connection pool closes. Its requests end cancelled (the
        engine closes), or with `hand_back` (the user removed it) go on
        locally from the text they had."""
        self.scheduler.close()
        self._closing = True
        self._handing_back = hand_back
        future = self.io.submit(self._close())
        try:
            future.result(timeout)
        except Exception:
            pass
        for request in self.scheduler.drain():
            if hand_back and not request.is_cancelled:
                self.give_back(request, self._received.pop(request.request_id, ""),
                               f"{self.name.upper()} was removed")
            else:
                self.director.finish(request, "cancelled", self.name)

    # ---- on the loop ----------------------------------------------------------------
    async def _close(self) -> None:
        tasks = list(self._tasks.values()) + [t for t in (self._probe,) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()

    def _cancel(self, request_id: str) -> None:
        task = self._tasks.get(request_id)
        if task is not None:
            task.cancel()
        self._dispatch()

    async def _start(self) -> None:
        """Probe: its model list (the round trip), then one short answer (its
        speed), so that the router's first predictions are measured ones."""
        spec, scheduler = self.spec, self.scheduler
        self._client = make_client(spec.connect_s)
        self._probe = asyncio.current_task()
        try:
            sent = time.monotonic()
            models = await list_models(self._client, spec.url, self._key, spec.first_token_s)
            scheduler.cost.overhead_s = max(time.monotonic() - sent, 0.001)
            if self.model and models and self.model not in models:
                raise RemoteFault("model", f"it does not serve {self.model!r} "
                                           f"(it lists {', '.join(models[:5])})")
            names = self.local_names or set()
            if not self.model:  # the one it lists that is the loaded model, else its first
                self.model = next((m for m in models if m in names), models[0] if models else "")
            if self.local_names is not None and spec.serves is None and self.model not in names:
                raise RemoteFault("model", f"not routed: it serves {self.model!r}, not the "
                                           "loaded model (say which local model it serves, "
                                           "or use it as the model: Engine > Remote lanes…)")
            probe = Request(list(self.probe_ids), probe_params())
            probe.messages = self.probe_messages
            await self._answer_in_form(probe, probe=True)  # learns the prompt's form
        except asyncio.CancelledError:  # the engine closed meanwhile
            pass
        except Exception as exc:  # a fault, a bug or an odd server: said, not raised
            self._broken(self._fault(exc))
        finally:
            self._probe = None
            scheduler.warming_up = False
            self.ready.set()
            self.on_change(self)
            self._dispatch()

    def _fault(self, exc: Exception) -> RemoteFault:
        """Any failure as a RemoteFault whose text carries no API key: the
        one place every message built from a remote's reply (status bodies,
        mid-stream errors, model lists, exception texts) passes through on
        its way to the breaker, the dock, an error event or a request."""
        if isinstance(exc, RemoteFault):
            kind, text, retry = exc.kind, str(exc), exc.retry_after_s
        else:  # a bug or an odd server's effect: garbage, and the request goes on
            kind, text, retry = "garbage", f"{type(exc).__name__}: {exc}", None
        return RemoteFault(kind, scrub(text, self._key), retry)

    def _broken(self, fault: RemoteFault) -> None:
        why = f"{self.name.upper()} ({self.spec.host}): {fault}"
        if fault.kind in PERMANENT:
            self.scheduler.fail(why)
            self.director.emit(EngineErrorEvent("", None, message=why, lane=self.name))
        elif fault.kind == "busy":
            self.scheduler.rate_limited(fault.retry_after_s)
        else:
            self.scheduler.broke(str(fault))

    def _dispatch(self) -> None:
        scheduler = self.scheduler
        while (gone := scheduler.take_cancelled()) is not None:
            self.director.finish(gone, "cancelled", self.name)
        if self._closing or scheduler.warming_up:
            return
        while (request := scheduler.next_request()) is not None:
            self._tasks[request.request_id] = asyncio.get_running_loop().create_task(
                self._serve(request))

    async def _serve(self, request: Request) -> None:
        scheduler, rid = self.scheduler, request.request_id
        try:
            await self._answer_in_form(request)
            return
        except asyncio.CancelledError:
            scheduler.done(request)
            if self._handing_back and not request.is_cancelled:
                self.give_back(request, self._received.get(rid, ""),
                               f"{self.name.upper()} was removed")
            else:
                self.director.finish(request, "cancelled", self.name)
        except Exception as exc:  # a fault, or a bug: never a request left hanging
            fault = self._fault(exc)
            scheduler.done(request)
            if request.is_cancelled:
                self.director.finish(request, "cancelled", self.name)
                return
            self._broken(fault)
            what = "refused it" if fault.kind in ("busy", "prompt") else "failed"
            self.give_back(request, self._received.get(rid, ""),
                           f"{self.name.upper()} {what}: {fault}")
            self.on_change(self)
        finally:
            self._tasks.pop(rid, None)
            self._received.pop(rid, None)
            if not self._closing:
                self._dispatch()

    async def _answer_in_form(self, request: Request, probe: bool = False) -> str:
        """`_answer`, and where the server refused a token-id prompt, the same
        request once more as text; if that is taken, text from now on
        (prompt_form.py). If it is not, the refusal was something else: ids
        stay, and the second fault is raised."""
        try:
            return await self._answer(request, probe)
        except RemoteFault as fault:
            if not (self.prompt_as_ids and request.messages is None and refused_ids(fault)
                    and not self._received.get(request.request_id)):
                raise
        self.prompt_as_ids = False
        try:
            text = await self._answer(request, probe)
        except RemoteFault:
            self.prompt_as_ids = True
            raise
        TEXT_ONLY.add(self.spec.url)
        return text

    async def _answer(self, request: Request, probe: bool = False) -> str:
        """Stream one answer; returns its raw text (what it streamed so far is
        in `_received` meanwhile, for a fault's hand-back). Its text stops at
        max_tokens (finish "length"); the counts it reports are clamped."""
        scheduler = self.scheduler
        believed = 0 if probe else scheduler.held_for(request)
        n_at_start = max(scheduler.batch_size, 1)
        predicted = None if probe else self._predicted_s(request, believed, n_at_start)
        budget = OutputBudget(request.params.max_tokens, self.encode)
        answer = Answer(budget, believed, n_at_start, predicted, sent=time.monotonic())
        await self._stream(request, answer, probe)
        if answer.finish not in ("stop", "length"):
            raise RemoteFault("cut", f"the answer ended with {answer.finish!r}")
        return self._settle(request, answer, probe)

    def _predicted_s(self, request: Request, believed: int, n_at_start: int) -> float | None:
        """The cost model's seconds for the whole answer, as it is sent."""
        view = self.director.request_view(request)
        if view is None:
            return None
        return self.scheduler.cost.request_s(request.num_prompt - believed,
                                             view.expected_output, n_at_start)

    async def _stream(self, request: Request, answer: Answer, probe: bool) -> None:
        """Read the remote's chunks into `answer` and the request's tokens
        until it finishes, a stop string ends it or max_tokens is reached."""
        spec, scheduler = self.spec, self.scheduler
        max_tokens, budget = request.params.max_tokens, answer.budget
        body = request_body(request, self.model, self.prompt_as_ids, self.decode)
        chunks = stream_completion(
            self._client, spec.url, self._key, body, spec.first_token_s,
            spec.stall_s, CHARS_PER_TOKEN_LIMIT * max_tokens,
            chat=request.messages is not None,
            total_s=request_deadline_s(spec, scheduler.cost, max_tokens, scheduler.capacity))
        # aclosing: a stop string or max_tokens ends the answer here, and the
        # remote's stream closes now (it stops generating), not when collected.
        async with contextlib.aclosing(chunks) as chunks:
            async for chunk in chunks:
                answer.read(chunk, max_tokens, scheduler.batch_size)
                text, thought = budget.take(chunk.text, chunk.reasoning)
                if not (text or thought):
                    if budget.full:
                        answer.finish = "length"
                        break
                    continue
                if self._show(request, answer, text, thought, probe):
                    answer.finish = "stop"
                    break
                if budget.full:  # the rest is beyond max_tokens: not shown, not counted
                    answer.finish = "length"
                    break

    def _show(self, request: Request, answer: Answer, text: str, thought: str,
              probe: bool) -> bool:
        """A chunk's thinking and text as the request's tokens; True when a
        stop string ended the answer."""
        director, stream = self.director, request.text
        if answer.first is None:
            answer.first = time.monotonic()
            request.first_token_at = director.clock()
        if thought and stream is not None:  # a chat's thinking, apart
            stream.reasoning += thought
            director.emit(Token(request.request_id, request.tab_id, -1, "",
                                self.name, director.clock(), reasoning=thought))
        if not text:
            return False
        if not probe:
            self._received[request.request_id] = answer.budget.text
        if stream is not None:
            shown, thinking = stream.add_text(text)
            if shown or thinking:
                director.emit(Token(request.request_id, request.tab_id, -1, shown,
                                    self.name, director.clock(), reasoning=thinking))
            if stream.stopped:
                return True
        self.scheduler.output_tokens += 1
        return False

    def _settle(self, request: Request, answer: Answer, probe: bool) -> str:
        """A finished answer: its counts (the server's, clamped), what the
        cost model learns from it, and (unless the probe) the request
        finished; returns its raw text."""
        end = time.monotonic()
        scheduler, max_tokens, raw = self.scheduler, request.params.max_tokens, answer.budget.text
        if request.messages is not None and answer.usage_prompt is not None:
            # A remote model's prompt: its server counted it (ours guessed),
            # bounded by what the chat can be (it becomes a list's length).
            request.prompt_ids = [0] * bound_prompt_tokens(answer.usage_prompt,
                                                           request.messages)
        cached = (min(answer.usage_cached, request.num_prompt)
                  if answer.usage_cached is not None else None)
        ids = self.encode(raw)[:max_tokens] if self.encode is not None else []
        out = (answer.usage_out if answer.usage_out is not None
               else (len(ids) or min(answer.budget.chunks, max_tokens)))
        if self.encode is None:
            ids = [-1] * out  # counted, not known: the server's tokens (<= max_tokens)
        first = answer.first or end
        mean_n = answer.concurrency / answer.seen if answer.seen else float(answer.n_at_start)
        cost = scheduler.cost
        expected_tpot = 1 / cost.stream_tps(round(mean_n))
        kept = out < 2 or (end - first) / (out - 1) <= 1.5 * expected_tpot
        uncached = request.num_prompt - (cached if cached is not None else answer.believed)
        cost.observe(uncached, first - answer.sent, out, end - first, mean_n,
                     answer.predicted, end - answer.sent)
        if probe:
            scheduler.breaker.success()
            return raw
        request.output_ids = ids
        request.cached_tokens = cached if cached is not None else answer.believed
        scheduler.answered(request, request.prompt_ids + ids, cached, answer.believed, mean_n,
                           kept)
        scheduler.done(request)
        self.director.finish(request, answer.finish, self.name)
        return raw
