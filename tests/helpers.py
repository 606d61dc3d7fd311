"""Shared helpers for engine tests."""

from __future__ import annotations

import threading

import mlx.core as mx
from mlx_lm.generate import generate_step

from engine.core.events import Finished, Token
from engine.core.router import LaneView


def reference_greedy(loaded, prompt_ids: list[int], max_tokens: int) -> list[int]:
    """mlx-lm's own greedy tokens, cut after the first stop token as the engine does."""
    out = []
    for token, _ in generate_step(mx.array(prompt_ids), loaded.model, max_tokens=max_tokens):
        token = int(token)
        out.append(token)
        if token in loaded.stop_token_ids:
            break
    return out


def prompt_of(loaded, text: str) -> list[int]:
    return list(loaded.tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True))


class TokenCounter:
    """Counts Token events per request; lets a test wait for the n-th token."""

    def __init__(self, engine):
        self._counts: dict[str, int] = {}
        self._done: set[str] = set()
        self._cond = threading.Condition()
        engine.subscribe(self._on_event)

    def _on_event(self, event) -> None:
        if isinstance(event, (Token, Finished)):
            with self._cond:
                if isinstance(event, Token):
                    self._counts[event.request_id] = self._counts.get(event.request_id, 0) + 1
                else:
                    self._done.add(event.request_id)
                self._cond.notify_all()

    def wait_for(self, request_id: str, n: int, timeout: float = 60.0) -> None:
        """Wait until the request has streamed n tokens or has finished."""
        with self._cond:
            ok = self._cond.wait_for(lambda: self._counts.get(request_id, 0) >= n
                                     or request_id in self._done, timeout)
        assert ok, f"{request_id} did not reach {n} tokens"


def cheap_widths(engine) -> None:
    """Every drafting lane of `engine` thinks wider steps cost almost nothing
    more, so every step that can draft does: for tests of the drafting
    machinery (what holds with drafts on), not of the policy's judgement."""
    from engine.core.draft_cost import WidthCost

    class Cheap(WidthCost):
        def of(self, rows):
            return lambda k: 1.0 + 0.001 * k

    for lane in engine.lanes.values():
        if lane.runner.batch.drafts is not None:
            lane.runner.batch.drafts.planner.costs = Cheap()


def foreign_tokenizer_copy(src, dst):
    """The model folder `src` copied to `dst` with two tokens' ids swapped in
    its tokenizer: another tokenizer of the same size (a draft model that
    must be refused)."""
    import json
    import shutil

    shutil.copytree(src, dst)
    path = dst / "tokenizer.json"
    data = json.loads(path.read_text())
    vocab = data["model"]["vocab"]
    a, b = [t for t in vocab if t.isalpha() and len(t) > 2][:2]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    path.write_text(json.dumps(data))
    return dst


def lane_view(name, cost, **kw) -> LaneView:
    """A lane as the router sees it, named for its device, idle unless told."""
    base = dict(queue_depth=0, batch_size=0, pending_prompt_tokens=0)
    base.update(kw)
    return LaneView(name, name, cost=cost, **base)
