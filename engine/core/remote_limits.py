"""What a remote server may make Tandem do: plain Python, no I/O.

A remote is outside Tandem's trust boundary (docs: DESIGN.md, "Trust
boundaries"), so every number it reports is bounded before use, its text is
held to the request's `max_tokens`, each request has an overall deadline, and
no message built from its reply carries the API key Tandem sent it.
"""

from __future__ import annotations

from typing import Callable

from .remote import RemoteSpec
from .remote_cost import RemoteCost

# ---- the overall deadline of one request ------------------------------------
# A stream may go 10x slower than the speed measured, and never counts as
# slower than 1 token/s: an honest but slow server is not cut off, while one
# that streams forever (empty chunks, a trickle) ends with a timeout.
SPEED_FRACTION = 0.1
MIN_TPS = 1.0
MAX_REQUEST_S = 3600.0  # however large max_tokens is


def request_deadline_s(spec: RemoteSpec, cost: RemoteCost, max_tokens: int,
                       concurrency: int) -> float:
    """Seconds from sending a request to the end of its answer, at most:
    the first-token allowance plus max_tokens at a fraction of the speed
    measured (at `concurrency` streams). Never shorter than one first token
    plus one stall (what the per-event limits allow anyway), never over an hour."""
    tps = max(SPEED_FRACTION * cost.stream_tps(max(concurrency, 1)), MIN_TPS)
    floor = spec.first_token_s + spec.stall_s
    return min(max(spec.first_token_s + max_tokens / tps, floor), max(MAX_REQUEST_S, floor))


# ---- the counts it reports -----------------------------------------------------
PROMPT_CAP = 1 << 24
TEMPLATE_SLACK = 4096  # a server's own template and system prompt, in tokens
PER_MESSAGE_SLACK = 64


def bound_prompt_tokens(reported: int, messages: list[dict]) -> int:
    """A remote model's prompt size as its server reported it, bounded by
    what the chat can be: a token covers at least one byte of text (byte-level
    BPE, SentencePiece's byte fallback), plus room for its template. The
    count becomes a list of that length (Request.num_prompt), so this bound
    keeps the memory in proportion to the chat sent."""
    size = sum(len(str(m.get("content", "")).encode("utf-8", "replace")) for m in messages)
    limit = min(size + TEMPLATE_SLACK + PER_MESSAGE_SLACK * len(messages), PROMPT_CAP)
    return max(0, min(reported, limit))


# ---- its text, held to max_tokens --------------------------------------------------
CHECK_MARGIN = 4  # tokens: chunks counted apart may count a few fewer joined


class OutputBudget:
    """The text of one answer, cut at `max_tokens` tokens.

    With a tokenizer (`encode`, a lane serving the loaded model) the text is
    counted: each chunk apart (linear time), and the whole text once that sum
    nears the limit; the chunk that goes over is cut to its longest prefix
    that fits (binary search) and `full` is set. Without one (a remote model)
    each chunk with text counts as a token, as servers stream them."""

    def __init__(self, max_tokens: int, encode: Callable[[str], list[int]] | None = None):
        self.max_tokens = max_tokens
        self.encode = encode
        self.text = ""
        self.chunks = 0  # chunks with text or reasoning taken
        self.full = False  # the answer reached max_tokens: the lane ends it ("length")
        self._approx = 0  # tokens of `text`: exact at the last whole count, plus chunks

    def take(self, text: str, reasoning: str = "") -> tuple[str, str]:
        """The part of a chunk within the budget ("" once it is spent)."""
        if self.full or not (text or reasoning):
            return "", ""
        if self.encode is None:
            if self.chunks >= self.max_tokens:
                self.full = True
                return "", ""
            self.chunks += 1
            self.text += text
            return text, reasoning
        self.chunks += 1
        self._approx += len(self.encode(text)) if text else 0
        if self._approx + CHECK_MARGIN > self.max_tokens:
            self._approx = self._count(self.text + text)
            if self._approx > self.max_tokens:
                self.full = True
                text = self._fit(text)
        self.text += text
        return text, reasoning

    def _count(self, text: str) -> int:
        return len(self.encode(text)) if text else 0

    def _fit(self, text: str) -> str:
        """The longest prefix of `text` that keeps the whole within max_tokens."""
        lo, hi = 0, len(text)  # text[:lo] fits, text[:hi] does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._count(self.text + text[:mid]) <= self.max_tokens:
                lo = mid
            else:
                hi = mid
        return text[:lo]


# ---- no secret in what it says ---------------------------------------------------
SECRET_PIECE = 8  # any run of this many characters of the key is scrubbed
MASK = "***"


def scrub(text: str, secret: str | None) -> str:
    """`text` without `secret`, nor any piece of it of SECRET_PIECE or more
    characters (a body cut short, an echo of part of a header). A key shorter
    than that is scrubbed where it appears whole."""
    if not secret or not text:
        return text
    n = min(SECRET_PIECE, len(secret))
    pieces = {secret[i:i + n] for i in range(len(secret) - n + 1)}
    masked = bytearray(len(text))
    for i in range(len(text) - n + 1):
        if text[i:i + n] in pieces:
            masked[i:i + n] = b"\x01" * n
    if not any(masked):
        return text
    out, i = [], 0
    while i < len(text):
        if masked[i]:
            while i < len(text) and masked[i]:
                i += 1
            out.append(MASK)
        else:
            out.append(text[i])
            i += 1
    return "".join(out)
