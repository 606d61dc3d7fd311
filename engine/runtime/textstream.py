"""Token ids to streamed text: whole characters only, stop strings held back,
a reasoning model's thinking apart from its answer."""

from __future__ import annotations

from mlx_lm.generate import TextStateMachine
from mlx_lm.tokenizer_utils import TokenizerWrapper


def starts_thinking(tokenizer: TokenizerWrapper, prompt_ids: list[int]) -> bool | None:
    """Where a reasoning model's answer begins: inside its thinking (True: the
    chat template opened `<think>` at the end of the prompt, as DeepSeek-R1's
    does), outside it (False: the model writes `<think>` itself, as Qwen3
    does), or None for a model that does not think (mlx-lm infers the markers
    from the vocabulary: `<think>`, `<|channel>thought`, ...)."""
    if not getattr(tokenizer, "has_thinking", False):
        return None
    return tokenizer.rfind_think_start(prompt_ids) > tokenizer.rfind_think_end(prompt_ids)


class TextStream:
    """Turns one request's tokens into text deltas.

    mlx-lm's streaming detokenizer never emits half a multi-byte character;
    on top of it, text that could be the start of a stop string is held back
    until it is known not to be one, and the stop string itself is never shown.
    For a reasoning model (`thinking` not None) mlx-lm's text state machine
    splits the text at the thinking markers, which it strips: `add` returns
    (answer delta, thinking delta). Stop strings apply to the answer.
    """

    def __init__(self, tokenizer: TokenizerWrapper, stop: tuple[str, ...] = (),
                 thinking: bool | None = None):
        # A fresh streaming detokenizer, sharing the wrapper's token map.
        self._detok = tokenizer.detokenizer
        self._stop = stop
        self._hold = max((len(s) for s in stop), default=1) - 1
        self._text = ""  # the answer decoded so far
        self._emitted = 0  # characters of _text already given out
        self.reasoning = ""  # the thinking so far (markers stripped)
        self.stopped = False
        self._machine = None
        if thinking is not None:
            self._machine = TextStateMachine({
                "normal": [(tokenizer.think_start, "reasoning")],
                "reasoning": [(tokenizer.think_end, "normal")]})
            self._state = self._machine.make_state("reasoning" if thinking else "normal")

    @property
    def text(self) -> str:
        """The visible answer so far (without any stop string or thinking)."""
        return self._text[: self._emitted]

    @property
    def thinking(self) -> bool:
        """Inside the model's thinking now."""
        return self._machine is not None and self._state[0] == "reasoning"

    def add(self, token_id: int) -> tuple[str, str]:
        """Add a token; return the new visible (answer, thinking) text."""
        if self.stopped:
            return "", ""
        self._detok.add_token(token_id)
        reasoning = self._split(self._detok.last_segment)
        return self._release(final=False), reasoning

    def finish(self) -> tuple[str, str]:
        """Flush what is held back (the end of the answer)."""
        reasoning = ""
        if not self.stopped:
            self._detok.finalize()
            reasoning = self._split(self._detok.last_segment)
            if self._machine is not None:  # a marker's beginning left at the very end
                self._state, rest, state = TextStateMachine.flush(self._state)
                reasoning += self._take(state, rest)
        return self._release(final=True), reasoning

    def _split(self, segment: str) -> str:
        """Route decoded text: the answer's part to _text; returns the thinking's."""
        if self._machine is None:
            self._text += segment
            return ""
        self._state, parts = TextStateMachine.split(self._state, segment)
        return "".join(self._take(state, text) for state, text in parts)

    def _take(self, state: str | None, text: str) -> str:
        if state == "reasoning":
            self.reasoning += text
            return text
        self._text += text
        return ""

    def _release(self, final: bool) -> str:
        if self._stop:
            start = max(0, self._emitted - self._hold)
            hits = [i for s in self._stop if (i := self._text.find(s, start)) >= 0]
            if hits:
                self._text = self._text[: min(hits)]
                self.stopped = True
                final = True
        end = len(self._text) if final else max(self._emitted, len(self._text) - self._held_tail())
        delta = self._text[self._emitted : end]
        self._emitted = end
        return delta

    def _held_tail(self) -> int:
        """Length of the longest tail of the text that starts a stop string."""
        for k in range(min(self._hold, len(self._text)), 0, -1):
            tail = self._text[-k:]
            if any(s.startswith(tail) for s in self._stop):
                return k
        return 0
