"""A GGUF's vocabulary as llama.cpp reads it (llama-vocab.cpp,
`llama_vocab::impl::load`): the tokens and, checked, their scores, types and
merges; the special token ids; and whether a text gets a BOS / EOS when
special tokens are added.

llama.cpp's rules, followed here:
- `tokenizer.ggml.add_bos_token` / `add_eos_token` decide when present.
- Absent, SentencePiece ('llama') adds BOS and no EOS; byte-level BPE
  ('gpt2') adds BOS only after the pre-split rules in BPE_BOS_RULES (llama 3's,
  tekken, ...), and no EOS.
- Absent or out-of-range ids fall back to SentencePiece's usual ones (unk 0,
  BOS 1, EOS 2). llama.cpp's byte-level default (11 for both) is the GPT-2
  vocabulary's ',' and is not followed: such a file has no BOS here.
- Adding a BOS (EOS) the file names no token for is an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core.errors import EngineError

# llama-vocab.cpp: the byte-level pre-split rules that set add_bos = true.
BPE_BOS_RULES = frozenset({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                           "midm-2.0", "lfm2", "jina-v5-nano", "tekken", "chameleon"})
# SentencePiece's default ids, used by llama.cpp when the file names none.
SPM_DEFAULT_IDS = {"unk": 0, "bos": 1, "eos": 2}
# Special token kind -> its id key.
ID_KEYS = {"bos": "tokenizer.ggml.bos_token_id", "eos": "tokenizer.ggml.eos_token_id",
           "unk": "tokenizer.ggml.unknown_token_id", "pad": "tokenizer.ggml.padding_token_id"}
MODELS = ("gpt2", "llama")


@dataclass(frozen=True, slots=True)
class GGUFVocab:
    model: str  # "gpt2" (byte-level BPE) or "llama" (SentencePiece BPE)
    pre: str  # the pre-split rule (byte-level BPE)
    tokens: list[str]
    vocab: dict[str, int]
    scores: list[float]  # one per token (SentencePiece merge order)
    types: list[int]  # one per token: 1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte
    merges: list[str]  # byte-level BPE
    space_prefix: bool  # SentencePiece: a '▁' in front of the text
    ids: dict[str, int | None]  # "bos", "eos", "unk", "pad"
    add_bos: bool
    add_eos: bool

    def token(self, kind: str) -> str | None:
        """The text of the special token `kind`, if the file has one."""
        i = self.ids[kind]
        return None if i is None else self.tokens[i]


def read_vocab(metadata: dict[str, Any]) -> GGUFVocab:
    """The vocabulary of plain metadata (engine/models/gguf/values.py);
    EngineError where it is missing, damaged or of a kind Tandem does not read."""
    model = metadata.get("tokenizer.ggml.model")
    if model not in MODELS:
        raise EngineError(
            f"Unsupported GGUF tokenizer '{model}' (Tandem reads byte-level BPE, 'gpt2', "
            "and SentencePiece BPE, 'llama').", "unsupported-architecture")
    tokens = metadata.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise _damaged("tokenizer.ggml.tokens", "a list of token strings", tokens)
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        twice = next(t for i, t in enumerate(tokens) if vocab[t] != i)
        raise EngineError(f"The GGUF's vocabulary holds the token {twice!r} twice: the file "
                          "is damaged.", "corrupt-model")
    n = len(tokens)
    pre = _get(metadata, "tokenizer.ggml.pre", str, "default")
    merges = _get(metadata, "tokenizer.ggml.merges", list, [])
    if model == "gpt2" and not (merges and all(isinstance(m, str) for m in merges)):
        raise _damaged("tokenizer.ggml.merges", "a list of merges", merges or None)
    ids = {kind: _special_id(metadata, kind, model, n) for kind in ID_KEYS}
    add_bos = _get(metadata, "tokenizer.ggml.add_bos_token", bool,
                   model == "llama" or pre in BPE_BOS_RULES)
    add_eos = _get(metadata, "tokenizer.ggml.add_eos_token", bool, False)
    for kind, adds in (("bos", add_bos), ("eos", add_eos)):
        if adds and ids[kind] is None:
            raise EngineError(
                f"The GGUF says to add a {kind.upper()} token to every text "
                f"(tokenizer.ggml.add_{kind}_token), but names none ({ID_KEYS[kind]} is "
                "missing or outside the vocabulary): the file is damaged.", "corrupt-model")
    return GGUFVocab(
        model=model, pre=pre, tokens=tokens, vocab=vocab,
        scores=_per_token(metadata, "tokenizer.ggml.scores", n, float, 0.0),
        types=_per_token(metadata, "tokenizer.ggml.token_type", n, int, 1),
        merges=merges,
        space_prefix=_get(metadata, "tokenizer.ggml.add_space_prefix", bool, model == "llama"),
        ids=ids, add_bos=add_bos, add_eos=add_eos)


def _special_id(metadata: dict[str, Any], kind: str, model: str, n: int) -> int | None:
    """The file's id for `kind`; else (absent or outside the vocabulary) the default."""
    default = SPM_DEFAULT_IDS.get(kind) if model == "llama" else None
    if default is not None and default >= n:
        default = None
    i = _get(metadata, ID_KEYS[kind], int, None)
    return i if i is not None and 0 <= i < n else default


def _per_token(metadata: dict[str, Any], key: str, n: int, kind: type, default: Any) -> list:
    """An array with a value per token (extra values ignored, as llama.cpp does)."""
    values = metadata.get(key)
    if values is None:
        return [default] * n
    if (not isinstance(values, list) or len(values) < n
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                       for v in values[:n])):
        raise _damaged(key, f"a number for each of the {n} tokens", values)
    return [kind(v) for v in values[:n]]


def _get(metadata: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    """`key`'s value if it has type `kind` (bool is no int here), else an error."""
    value = metadata.get(key)
    if value is None:
        return default
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _damaged(key, _KIND_NAMES[kind], value)
    return value


_KIND_NAMES = {bool: "true or false", int: "a whole number", str: "text", list: "a list"}


def _damaged(key: str, expected: str, value: Any) -> EngineError:
    shown = (f"a list of {len(value)} values" if isinstance(value, list)
             else "missing" if value is None else f"{type(value).__name__} {value!r:.40}")
    return EngineError(f"The GGUF's tokenizer metadata '{key}' is {shown}, not {expected}: "
                       "the file is damaged or was not made for llama.cpp.", "corrupt-model")
