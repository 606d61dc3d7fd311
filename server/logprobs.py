"""Logprobs in OpenAI's shapes, from the engine's `Token` events.

Chat completions: `{"content": [{"token", "logprob", "bytes", "top_logprobs":
[{"token", "logprob", "bytes"}]}]}`; completions: `{"tokens",
"token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}`. The
values are the model's raw log-probabilities (before temperature, penalties
and filters), as vLLM returns them by default. A token's text is its own
bytes decoded (a piece of a multi-byte character shows as U+FFFD; `bytes`
carries it whole).
"""

from __future__ import annotations

from functools import lru_cache


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed (a vocabulary piece -> its bytes)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


BYTE_DECODER = _byte_decoder()


class TokenPieces:
    """A token id's bytes and text, for one tokenizer (cached)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.piece = lru_cache(maxsize=65536)(self._piece)

    def _piece(self, token_id: int) -> tuple[str, list[int]]:
        tok = self.tokenizer
        try:
            name = tok.convert_ids_to_tokens(token_id)
        except Exception:
            name = None
        data: bytes | None = None
        if isinstance(name, str) and name:
            if name.startswith("<0x") and name.endswith(">") and len(name) == 6:
                data = bytes([int(name[3:5], 16)])  # SentencePiece's byte fallback
            elif all(ch in BYTE_DECODER for ch in name) and not _is_special(tok, token_id):
                data = bytes(BYTE_DECODER[ch] for ch in name)  # byte-level BPE
            elif "▁" in name:
                data = name.replace("▁", " ").encode("utf-8")
        if data is None:
            data = tok.decode([token_id]).encode("utf-8")
        return data.decode("utf-8", errors="replace"), list(data)


def _is_special(tokenizer, token_id: int) -> bool:
    return token_id in set(getattr(tokenizer, "all_special_ids", None) or ())


def chat_entries(tokens, pieces: TokenPieces) -> list[dict]:
    out = []
    for token in tokens:
        text, data = pieces.piece(token.token_id)
        top = []
        for tid, lp in token.top_logprobs:
            t_text, t_data = pieces.piece(tid)
            top.append({"token": t_text, "logprob": lp, "bytes": t_data})
        out.append({"token": text, "logprob": token.logprob, "bytes": data,
                    "top_logprobs": top})
    return out


def completion_logprobs(tokens, pieces: TokenPieces, offset: int = 0) -> dict:
    """The legacy shape; `offset`: characters of text before these tokens."""
    out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for token in tokens:
        text, _ = pieces.piece(token.token_id)
        out["tokens"].append(text)
        out["token_logprobs"].append(token.logprob)
        top: dict[str, float] = {}
        for tid, lp in token.top_logprobs:
            top.setdefault(pieces.piece(tid)[0], lp)
        out["top_logprobs"].append(top)
        out["text_offset"].append(offset)
        offset += len(text)
    return out
