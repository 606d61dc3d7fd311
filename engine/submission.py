"""A request's way in: `Engine.submit` makes a `Request` of what `prepare`
made, reads its prefix back from disk first where that pays
(engine/restore.py), routes it (the director's policy), and queues it on a
lane; `cancel` stops it wherever it is.

Kept apart from engine.py, the facade; it reads the engine's public names
(director, prefix cache, restorer, lanes, remotes, the model's tokenizer)
and registers handles with its event hub."""

from __future__ import annotations

import dataclasses

from .core.errors import EngineError
from .core.events import Queued, Routed
from .core.params import SamplingParams
from .core.request import Request
from .handle import RequestHandle
from .hub import EventHub
from .interface import Prepared
from .prompt import check_ids, with_grammar
from .restore import Restorer, open_disk_tier


def _with_images(request: Request, routed: Routed) -> Routed:
    """A vision request's routing says how many images its prefill encodes:
    those past its prefix found in the cache or read back from disk (the
    timeline: "prefill (2 images)")."""
    if request.vision is None:
        return routed
    found = max(routed.cached_tokens, request.restored_tokens or 0)
    return dataclasses.replace(routed, images=request.vision.images_from(found))


class Submission:
    def __init__(self, engine, hub: EventHub):
        self.engine, self._hub = engine, hub

    def restorer(self, loaded, folder: str | None, budget_bytes: int | None) -> Restorer | None:
        """The disk tier under `folder` (None: none) and the restorer that
        reads a prompt's prefix back from it before routing."""
        engine = self.engine
        disk = (open_disk_tier(engine.prefix_cache, loaded, folder, budget_bytes)
                if folder else None)
        if disk is None:
            return None
        return Restorer(engine.prefix_cache, self.route, self.cancelled,
                        lambda: [lane.scheduler.prefill_rate()
                                 for lane in engine.lanes.values() if not lane.failed])

    def submit(self, prepared: Prepared, params: SamplingParams, tab_id: str | None,
               thinking: bool) -> RequestHandle:
        """`prepared` (as `Preparer.for_submit` made it) queued with `params`."""
        engine = self.engine
        params = with_grammar(params, prepared.grammar)
        request = self._request(prepared, params, tab_id, thinking)
        if engine.restorer is not None and engine.restorer.wants(request):
            # Its prefix is on disk: read back first (engine/restore.py), then routed.
            handle = self._register(request, tab_id)
            engine.restorer.submit(request)
            return handle
        lane, routed = engine.director.place(request)  # raises when it can never fit
        routed = _with_images(request, routed)
        if request.restore_note:  # its prefix is on disk, but prefilling it is sooner
            routed = dataclasses.replace(routed, reason=f"{request.restore_note}; "
                                                        f"{routed.reason}")
        handle = self._register(request, tab_id)
        self._enqueue(request, lane, routed)
        return handle

    def _register(self, request: Request, tab_id: str | None) -> RequestHandle:
        handle = RequestHandle(request, self.engine.cancel)
        self._hub.register(handle)
        self._hub.emit(Queued(request.request_id, tab_id, prompt_tokens=request.num_prompt))
        return handle

    def _enqueue(self, request: Request, lane, routed) -> None:
        self._hub.emit(routed)
        if lane.enqueue(request):
            self.engine.lane(lane.name).wake()
        else:  # the lane failed or closed since it was chosen
            self.engine.director.finish(request, "error",
                                        error=lane.failed or "The engine is closed.")

    def route(self, request: Request) -> None:
        """A restored request (the restorer's thread) is routed as any other."""
        director = self.engine.director
        try:
            lane, routed = director.place(request)
            routed = _with_images(request, routed)
            if request.restored_tokens:  # the Decisions tab says where its warmth came from
                routed = dataclasses.replace(routed, reason=(
                    f"restored {request.restored_tokens:,} tokens from disk in "
                    f"{request.restore_s or 0:.2f} s; {routed.reason}"),
                    restored_tokens=request.restored_tokens, restore_s=request.restore_s)
            self._enqueue(request, lane, routed)
        except Exception as e:  # never a request left without its Finished
            director.finish(request, "error", error=str(e))

    def cancelled(self, request: Request) -> None:
        self.engine.director.finish(request, "cancelled")

    def _request(self, prepared: Prepared, params: SamplingParams, tab_id: str | None,
                 thinking: bool) -> Request:
        from .runtime.textstream import TextStream

        engine = self.engine
        ids = list(prepared.prompt_ids)
        if not ids:
            raise EngineError("The prompt is empty.", "bad-argument")
        vision = getattr(prepared, "vision", None)
        model_ids = vision.model_ids if vision is not None else ids  # (ids: its cache keys)
        check_ids(model_ids, engine.vocab_size)
        # A bad grammar is the caller's error; it is built off the lanes (on
        # the builder's thread, waited for; `prepare` built it already), and
        # a lane only copies it.
        grammar = engine.prepare_grammar(params.grammar) if params.grammar is not None else None
        if len(ids) >= engine.context_length:
            raise EngineError(
                f"The conversation is {len(ids)} tokens long, more than the model's context "
                f"of {engine.context_length} tokens. Start a new chat or shorten it.",
                "prompt-too-long")
        request = Request(prompt_ids=ids, params=params, tab_id=tab_id, vision=vision)
        if params.prediction:
            request.prediction_ids = engine.tokenizer.encode(params.prediction,
                                                             add_special_tokens=False)
        request.grammar_matcher = grammar
        request.cached_tokens = engine.prefix_cache.cached_length(ids, limit=len(ids) - 1)
        request.prefix_note = engine.prefix_cache.off_reason
        request.text = TextStream(engine.tokenizer, params.stop,
                                  engine.thinking_format if thinking else None, model_ids,
                                  prepared.call_format)
        return request

    def cancel(self, request_id: str) -> None:
        handle = self._hub.handle(request_id)
        if handle is not None:
            handle.request.cancel_event.set()
            if self.engine.director.cancel_waiting(handle.request):
                return
            self.engine.remotes.cancel(handle.request)
            for lane in self.engine.lanes.values():  # it may be moving between lanes
                lane.wake()

    def cancel_tab(self, tab_id: str) -> None:
        for rid in self._hub.ids_of_tab(tab_id):
            self.engine.cancel(rid)
