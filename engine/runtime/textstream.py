"""Token ids to streamed text: whole characters only, stop strings held back,
a reasoning model's thinking apart from its answer."""

from __future__ import annotations

from dataclasses import dataclass

from mlx_lm.generate import TextStateMachine
from mlx_lm.tokenizer_utils import TokenizerWrapper

# gpt-oss's harmony format: thinking is the "analysis" channel, the answer the
# "final" one; the markers between them are dropped.
HARMONY = {"normal": [("<|channel|>analysis<|message|>", "reasoning"),
                      ("<|start|>assistant", "normal"),
                      ("<|channel|>final<|message|>", "normal")],
           "reasoning": [("<|end|>", "normal")]}


@dataclass(frozen=True)
class ThinkingFormat:
    """How a reasoning model marks its thinking: the text state machine's
    transitions, and the marker tokens that say whether a prompt ends inside
    thinking (a template that opens it for the model)."""

    transitions: dict
    opens: tuple[int, ...]
    closes: tuple[int, ...]

    def starts_inside(self, prompt_ids: list[int]) -> bool:
        return _rfind(prompt_ids, self.opens) > _rfind(prompt_ids, self.closes)


def thinking_format(tokenizer: TokenizerWrapper) -> ThinkingFormat | None:
    """The model's thinking markers: those mlx-lm infers from the vocabulary
    (`<think>`, `<|channel>thought`, ...), else gpt-oss's harmony channels;
    None for a model that does not think. Read once per model (a vocabulary
    can hold 200k entries)."""
    if getattr(tokenizer, "has_thinking", False):
        return ThinkingFormat({"normal": [(tokenizer.think_start, "reasoning")],
                               "reasoning": [(tokenizer.think_end, "normal")]},
                              tuple(tokenizer.think_start_tokens),
                              tuple(tokenizer.think_end_tokens))
    try:
        vocab = tokenizer.get_vocab()
    except Exception:
        return None
    if all(t in vocab for t in ("<|channel|>", "<|message|>", "<|end|>", "<|start|>")):
        encode = tokenizer.encode
        return ThinkingFormat(HARMONY, tuple(encode(HARMONY["normal"][0][0],
                                                    add_special_tokens=False)),
                              tuple(encode("<|end|>", add_special_tokens=False)))
    return None


def _rfind(tokens: list[int], sequence: tuple[int, ...]) -> int:
    n = len(sequence)
    for i in range(len(tokens) - n, -1, -1):
        if n and tuple(tokens[i:i + n]) == sequence:
            return i
    return -1


class TextStream:
    """Turns one request's tokens into text deltas.

    mlx-lm's streaming detokenizer never emits half a multi-byte character;
    on top of it, text that could be the start of a stop string is held back
    until it is known not to be one, and the stop string itself is never shown.
    For a reasoning model (`thinking` not None) mlx-lm's text state machine
    splits the text at the thinking markers, which it strips: `add` returns
    (answer delta, thinking delta). Stop strings apply to the answer.
    `prompt_ids` says whether the answer begins inside thinking.
    """

    def __init__(self, tokenizer: TokenizerWrapper, stop: tuple[str, ...] = (),
                 thinking: ThinkingFormat | None = None, prompt_ids: list[int] = (),
                 tools=None):
        # A fresh streaming detokenizer, sharing the wrapper's token map.
        self._detok = tokenizer.detokenizer
        self._stop = stop
        self._hold = max((len(s) for s in stop), default=1) - 1
        self._text = ""  # the answer decoded so far
        self._emitted = 0  # characters of _text already given out
        self.reasoning = ""  # the thinking so far (markers stripped)
        self.stopped = False
        self.stop_hit: str | None = None  # the stop string that ended the answer
        # Tool calls (`tools`: the model's ToolFormat, engine/models/tools.py,
        # for a request that offered tools): the text between its markers,
        # one raw call each, apart from the answer.
        self.tool_calls: list[str] = []
        self._tool_text = ""
        self._new_calls: list[str] = []
        self.ended_in_call = False  # the answer ended inside its last call (no end marker)
        self._machine = None
        transitions: dict = {}
        if thinking is not None:
            transitions = {state: list(moves) for state, moves in thinking.transitions.items()}
        if tools is not None:
            transitions.setdefault("normal", []).append((tools.start, "tool"))
            # Mistral's calls have no end marker: they run to the answer's end.
            transitions["tool"] = [(tools.end, "normal")] if tools.end else []
        if transitions:
            self._machine = TextStateMachine(transitions)
            inside = thinking is not None and thinking.starts_inside(list(prompt_ids))
            self._state = self._machine.make_state("reasoning" if inside else "normal")

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

    def add_text(self, text: str) -> tuple[str, str]:
        """Add text another server decoded (a remote lane's answer): the
        same thinking split and stop strings as tokens get."""
        if self.stopped or not text:
            return "", ""
        reasoning = self._split(text)
        return self._release(final=False), reasoning

    def resume(self, token_ids: list[int]) -> None:
        """The tokens of text already added with `add_text` (continuing
        locally after a remote failed): the detokenizer reads them, silently,
        so that the next token's text joins where the remote's ended."""
        for token_id in token_ids:
            self._detok.add_token(token_id)
        self._detok.last_segment  # read and dropped: that text was shown

    def finish(self) -> tuple[str, str]:
        """Flush what is held back (the end of the answer)."""
        reasoning = ""
        if not self.stopped:
            self._detok.finalize()
            reasoning = self._split(self._detok.last_segment)
            if self._machine is not None:  # a marker's beginning left at the very end
                self._state, rest, state = TextStateMachine.flush(self._state)
                reasoning += self._take(state, rest)
        if self._tool_text.strip():  # a call the answer ended inside: read as it is
            self.ended_in_call = True
            self._end_call()
        return self._release(final=True), reasoning

    def take_calls(self) -> tuple[str, ...]:
        """The tool calls completed since the last time (raw text each)."""
        calls, self._new_calls = tuple(self._new_calls), []
        return calls

    def _end_call(self) -> None:
        self.tool_calls.append(self._tool_text)
        self._new_calls.append(self._tool_text)
        self._tool_text = ""

    def _split(self, segment: str) -> str:
        """Route decoded text: the answer's part to _text; returns the thinking's."""
        if self._machine is None:
            self._text += segment
            return ""
        self._state, parts = TextStateMachine.split(self._state, segment)
        thinking = "".join(self._take(state, text) for state, text in parts)
        if self._tool_text and self._state[0] != "tool":  # its end marker came
            self._end_call()
        return thinking

    def _take(self, state: str | None, text: str) -> str:
        if state == "tool":
            self._tool_text += text
            return ""
        if self._tool_text and state != "tool":  # its end marker passed: one call
            self._end_call()
        if state == "reasoning":
            self.reasoning += text
            return text
        self._text += text
        return ""

    def _release(self, final: bool) -> str:
        if self._stop:
            start = max(0, self._emitted - self._hold)
            hits = [(i, -len(s), s) for s in self._stop if (i := self._text.find(s, start)) >= 0]
            if hits:  # the earliest; of those starting there, the longest
                at, _, self.stop_hit = min(hits)
                self._text = self._text[:at]
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
