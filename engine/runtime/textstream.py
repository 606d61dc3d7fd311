"""Token ids to streamed text: whole characters only, stop strings held back."""

from __future__ import annotations

from mlx_lm.tokenizer_utils import TokenizerWrapper


class TextStream:
    """Turns one request's tokens into text deltas.

    mlx-lm's streaming detokenizer never emits half a multi-byte character;
    on top of it, text that could be the start of a stop string is held back
    until it is known not to be one, and the stop string itself is never shown.
    """

    def __init__(self, tokenizer: TokenizerWrapper, stop: tuple[str, ...] = ()):
        # A fresh streaming detokenizer, sharing the wrapper's token map.
        self._detok = tokenizer.detokenizer
        self._stop = stop
        self._hold = max((len(s) for s in stop), default=1) - 1
        self._text = ""  # everything decoded so far
        self._emitted = 0  # characters of _text already given out
        self.stopped = False

    @property
    def text(self) -> str:
        """The visible text so far (without any stop string)."""
        return self._text[: self._emitted]

    def add(self, token_id: int) -> str:
        """Add a token; return the new visible text (possibly '')."""
        if self.stopped:
            return ""
        self._detok.add_token(token_id)
        self._text += self._detok.last_segment
        return self._release(final=False)

    def finish(self) -> str:
        """Flush what is held back (the end of the answer)."""
        if not self.stopped:
            self._detok.finalize()
            self._text += self._detok.last_segment
        return self._release(final=True)

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
