"""POST /v1/responses: OpenAI's Responses API on the same engine, gate, key
and slots as chat completions (responses_body.py turns the body into a chat
request). The answer is a `response` object whose `output` holds the model's
thinking (a `reasoning` item), its text (a `message` item) and its tool calls
(`function_call` items); streamed, the documented server-sent events in
order. Responses are kept in memory (bounded, per API key) unless `store`
is false, so a follow-up can name one with `previous_response_id`; its
prompt then starts with the same tokens, and the prefix cache has them."""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine import Finished, Token, strict_loads

from .flow import GuardedStream, ServerState, admit, check_key, collect, read_body, sse
from .raw_body import MAX_IMAGE_BODY_BYTES, check_images_carried, parse_json
from .errors import APIError
from .responses_body import ResponsesJob, parse
from .tool_calls import read_calls

MAX_STORED = 1024  # responses kept for previous_response_id, least recently used out first


@dataclass(frozen=True, slots=True)
class _Kept:
    """One stored response as it is held: its turns as compact JSON (what the
    budget counts is what is held, never a tree of parsed objects 18 times
    its JSON), each message's images apart (decoded pixels, counted)."""

    previous: str | None
    turns: bytes  # the turns, JSON, images and parts left out
    images: tuple  # per turn: (images, parts) or None
    size: int

    @classmethod
    def of(cls, previous: str | None, turns: list[dict]) -> _Kept:
        plain = [{k: v for k, v in m.items() if k not in ("images", "parts")} for m in turns]
        data = json.dumps(plain, ensure_ascii=False, separators=(",", ":")).encode()
        images = tuple((m["images"], m.get("parts")) if m.get("images") else None
                       for m in turns)
        pixels = sum(i.width * i.height * 3 for m in turns for i in m.get("images") or ())
        return cls(previous, data, images, len(data) + pixels + 64 * len(turns))

    def messages(self) -> list[dict]:
        turns = json.loads(self.turns)
        for turn, seen in zip(turns, self.images):
            if seen is not None:
                turn["images"], turn["parts"] = seen
        return turns


class ResponseStore:
    """Each kept response: (previous id, the turns it added: its input and
    its answer as chat messages), per owner (the API key's hash), within a
    count and a byte budget (a client sending 4 MB bodies cannot fill the
    memory). Over either, the owner holding the most gives up its least
    recently used response: a client fills the store alone, but never evicts
    another's to make room while it holds more. A chain with a link
    forgotten is not found (a 404 the client can act on)."""

    def __init__(self, limit: int = MAX_STORED, max_bytes: int = 64 << 20):
        self.limit, self.max_bytes = limit, max_bytes
        self._owners: dict[str, OrderedDict[str, _Kept]] = {}
        self._bytes: dict[str, int] = {}
        self._lock = threading.Lock()

    def put(self, owner: str, rid: str, previous: str | None, turns: list[dict]) -> bool:
        """Keep a response; False when it alone is over the whole budget."""
        kept = _Kept.of(previous, turns)
        if kept.size > self.max_bytes:
            return False
        with self._lock:
            self._owners.setdefault(owner, OrderedDict())[rid] = kept
            self._bytes[owner] = self._bytes.get(owner, 0) + kept.size
            while sum(map(len, self._owners.values())) > self.limit:
                self._evict(max(self._owners, key=lambda o: len(self._owners[o])))
            while sum(self._bytes.values()) > self.max_bytes:
                self._evict(max(self._bytes, key=self._bytes.__getitem__))
        return True

    def _evict(self, heaviest: str) -> None:
        """The least recently used response of the owner holding the most."""
        items = self._owners[heaviest]
        self._bytes[heaviest] -= items.popitem(last=False)[1].size
        if not items:
            del self._owners[heaviest], self._bytes[heaviest]

    def history(self, owner: str, rid: str) -> list[dict] | None:
        chain: list[_Kept] = []
        with self._lock:
            items = self._owners.get(owner, {})
            while rid is not None:
                found = items.get(rid)
                if found is None:
                    return None
                items.move_to_end(rid)
                chain.append(found)
                rid = found.previous
        return [m for kept in reversed(chain) for m in kept.messages()]


def owner_of(request: Request) -> str:
    """Whose stored responses a request may read: its key, however sent
    (`Authorization: Bearer K` or Anthropic's `x-api-key: K`)."""
    given = request.headers.get("authorization")
    if given is not None:
        scheme, _, token = given.partition(" ")
        given = token.strip() if scheme.lower() == "bearer" else given
    else:
        given = request.headers.get("x-api-key") or ""
    return hashlib.sha256(given.encode("utf-8", "surrogateescape")).hexdigest()[:16]


async def responses_route(state: ServerState, store: ResponseStore, request: Request) -> Response:
    check_key(request, state)
    owner = owner_of(request)
    data = await read_body(request, MAX_IMAGE_BODY_BYTES)  # images may come (data: URLs)
    body = await state.run_for(request, parse_json, data, MAX_IMAGE_BODY_BYTES)
    rj: ResponsesJob = await state.run_for(request, parse, body,
                                           state.engine.generation_defaults.as_dict(),
                                           lambda rid: store.history(owner, rid),
                                           state.config.image_urls)
    check_images_carried(data, rj.new_messages, rj.job.tools)
    reply = Reply(state, rj, store, owner)
    try:
        slot, handle = await admit(state, request, rj.job)
    except APIError as e:
        if e.code == "context_length_exceeded":
            if rj.job.stream:  # said in the stream, as OpenAI does
                return GuardedStream(reply.failed_stream(e), _NoSlot(), _NoHandle(),
                                     state.config.send_timeout_s)
            raise APIError(400, e.message, param="input", code=e.code) from None
        raise
    if rj.job.stream:
        return GuardedStream(reply.stream(request, handle), slot, handle,
                             state.config.send_timeout_s)
    done, _ = await collect(request, slot, handle)
    if done.reason == "error":
        raise APIError(500, done.error or "generation failed", kind="server_error")
    return JSONResponse(reply.finish(done))


class _NoSlot:
    def release(self) -> None:
        pass


class _NoHandle:
    def cancel(self) -> None:
        pass


class Reply:
    """One response: its object, its output items, and its events."""

    def __init__(self, state: ServerState, rj: ResponsesJob, store: ResponseStore, owner: str):
        self.state, self.rj, self.store, self.owner = state, rj, store, owner
        self.id = "resp_" + secrets.token_hex(24)
        self.created = int(time.time())
        self.output: list[dict] = []
        self.seq = 0

    def obj(self, status: str, usage: dict | None = None, error: dict | None = None,
            incomplete: dict | None = None) -> dict:
        return {"id": self.id, "object": "response", "created_at": self.created,
                "status": status, "error": error, "incomplete_details": incomplete,
                "model": self.state.ids[0], "output": list(self.output), "usage": usage,
                "user": self.rj.job.user, **self.rj.echo}

    # ---- the answer whole ---------------------------------------------------------
    def finish(self, done: Finished) -> dict:
        """The output items from the finished answer, the response kept, its object."""
        calls, unread, cut = read_calls(self.state.engine, done.tool_calls,
                                        self.rj.job.tools, done.cut_call)
        if done.reasoning and not any(i["type"] == "reasoning" for i in self.output):
            self.output.insert(0, reasoning_item(done.reasoning))
        text = done.text + unread
        if text.strip() and not any(i["type"] == "message" for i in self.output):
            self.output.append(message_item(text))
        if not any(i["type"] == "function_call" for i in self.output):
            self.output += [call_item(c, self.rj.namespaces) for c in calls]
            if cut:  # the answer ended inside it: its arguments are a beginning
                self.output[-1]["status"] = "incomplete"
        if not self.output:
            self.output.append(message_item(""))
        self._keep()
        called = any(i["type"] == "function_call" for i in self.output)
        # A turn that ends in whole calls is complete; one cut inside a call is not.
        incomplete = ({"reason": "max_output_tokens"}
                      if done.reason == "length" and (done.cut_call or not called) else None)
        return self.obj("incomplete" if incomplete else "completed",
                        usage=self.usage(done), incomplete=incomplete)

    def usage(self, done: Finished) -> dict:
        thought = (len(self.state.engine.tokenizer.encode(done.reasoning,
                                                          add_special_tokens=False))
                   if done.reasoning else 0)
        return {"input_tokens": done.prompt_tokens,
                "input_tokens_details": {"cached_tokens": done.cached_tokens},
                "output_tokens": done.output_tokens,
                "output_tokens_details": {"reasoning_tokens": min(thought, done.output_tokens)},
                "total_tokens": done.prompt_tokens + done.output_tokens}

    def _keep(self) -> None:
        if not self.rj.store:
            return
        answer: dict = {"role": "assistant", "content": ""}
        for item in self.output:
            if item["type"] == "message":
                answer["content"] = item["content"][0]["text"]
            elif item["type"] == "function_call":
                answer.setdefault("tool_calls", []).append(
                    {"id": item["call_id"], "type": "function",
                     "function": {"name": item["name"], "arguments": _args(item)}})
        if not self.store.put(self.owner, self.id, self.rj.previous_id,
                              self.rj.new_messages + [answer]):
            self.rj.echo["store"] = False  # too large to keep: said, never a later 404

    # ---- streamed -------------------------------------------------------------------
    def event(self, kind: str, **fields) -> str:
        self.seq += 1
        payload = {"type": kind, "sequence_number": self.seq, **fields}
        return f"event: {kind}\ndata: {json.dumps(payload)}\n\n"

    async def failed_stream(self, error: APIError):
        yield self.event("response.created", response=self.obj("in_progress"))
        yield self.event("response.failed", response=self.obj(
            "failed", error={"code": error.code, "message": error.message}))

    async def stream(self, request: Request, handle):
        async for chunk in sse(request, handle, StreamedItems(self)):
            yield chunk


class StreamedItems:
    """Output items opened, grown and closed as tokens arrive."""

    def __init__(self, reply: Reply):
        self.reply = reply
        self.open: dict | None = None  # the item being streamed

    def start(self):
        reply = self.reply
        yield reply.event("response.created", response=reply.obj("in_progress"))
        yield reply.event("response.in_progress", response=reply.obj("in_progress"))

    def finished(self, event: Finished):
        reply = self.reply
        yield from self.close()
        if event.reason == "error":
            yield reply.event("response.failed", response=reply.obj(
                "failed", error={"code": "server_error",
                                 "message": event.error or "generation failed"}))
            return
        final = reply.finish(event)
        yield reply.event(f"response.{final['status']}", response=final)

    def token(self, event: Token):
        if event.reasoning:
            yield from self._grow("reasoning", event.reasoning)
        if event.text:
            yield from self._grow("message", event.text)
        if event.tool_calls:
            reply = self.reply
            calls, unread, cut = read_calls(reply.state.engine, event.tool_calls,
                                            reply.rj.job.tools, event.cut_call)
            if unread:
                yield from self._grow("message", unread)
            for n, call in enumerate(calls):
                yield from self.close()
                item = call_item(call, reply.rj.namespaces)
                if cut and n == len(calls) - 1:
                    item["status"] = "incomplete"
                index = len(reply.output)
                reply.output.append(item)
                yield reply.event("response.output_item.added", output_index=index,
                                  item={**item, "status": "in_progress", "arguments": ""})
                yield reply.event("response.function_call_arguments.delta",
                                  item_id=item["id"], output_index=index,
                                  delta=item["arguments"])
                yield reply.event("response.function_call_arguments.done", item_id=item["id"],
                                  output_index=index, arguments=item["arguments"],
                                  name=item["name"])
                yield reply.event("response.output_item.done", output_index=index, item=item)

    def _grow(self, kind: str, delta: str):
        reply = self.reply
        if self.open is None or self.open["type"] != kind:
            yield from self.close()
            item = reasoning_item("") if kind == "reasoning" else message_item("")
            self.open = item
            reply.output.append(item)
            index = len(reply.output) - 1
            shown = {**item, "status": "in_progress"}
            shown["content"] = []
            yield reply.event("response.output_item.added", output_index=index, item=shown)
            yield reply.event("response.content_part.added", item_id=item["id"],
                              output_index=index, content_index=0,
                              part={**item["content"][0], "text": ""})
        index = len(reply.output) - 1
        part = self.open["content"][0]
        part["text"] += delta
        name = "response.reasoning_text.delta" if kind == "reasoning" \
            else "response.output_text.delta"
        yield reply.event(name, item_id=self.open["id"], output_index=index, content_index=0,
                          delta=delta, **({"logprobs": []} if kind == "message" else {}))

    def close(self):
        if self.open is None:
            return
        reply, item, self.open = self.reply, self.open, None
        index = reply.output.index(item)
        part = item["content"][0]
        done = "response.reasoning_text.done" if item["type"] == "reasoning" \
            else "response.output_text.done"
        yield reply.event(done, item_id=item["id"], output_index=index, content_index=0,
                          text=part["text"], **({"logprobs": []}
                                                if item["type"] == "message" else {}))
        yield reply.event("response.content_part.done", item_id=item["id"],
                          output_index=index, content_index=0, part=part)
        yield reply.event("response.output_item.done", output_index=index, item=item)


def message_item(text: str) -> dict:
    return {"type": "message", "id": "msg_" + secrets.token_hex(24), "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [],
                         "logprobs": []}]}


def reasoning_item(text: str) -> dict:
    return {"type": "reasoning", "id": "rs_" + secrets.token_hex(24), "status": "completed",
            "summary": [], "content": [{"type": "reasoning_text", "text": text}]}


def call_item(call: dict, namespaces: dict) -> dict:
    """A chat-shaped tool call (tool_calls.read_calls) as a function_call item
    (naming its namespace when the function came in one)."""
    name = call["function"]["name"]
    item = {"type": "function_call", "id": "fc_" + secrets.token_hex(24),
            "call_id": call["id"], "name": name,
            "arguments": call["function"]["arguments"], "status": "completed"}
    if name in namespaces:
        item["namespace"] = namespaces[name]
    return item


def _args(item: dict):
    try:
        return strict_loads(item["arguments"])
    except ValueError:  # cut short, or a number out of range: kept as the model wrote it
        return item["arguments"]
