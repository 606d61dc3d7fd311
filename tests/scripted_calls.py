"""Scripted models (tests/scripted_model.py) in Qwen2.5's tool format
(tests/tool_models.py): every chat is answered with a given sequence of
pieces, each piece one added token. A scripted model's tokens must be
distinct (each token's embedding says which comes next), and a call's JSON
repeats its quotes and braces, so a call is written in a few whole pieces:
`<tool_call>`, `\\n{"name":"f","arguments":`, `{"x":1e999}`, `}\\n`,
`</tool_call>`. Compact JSON, as the forced-call grammar writes it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tests.scripted_model import build_scripted_model
from tests.tool_models import QWEN25_TOOLS

MARKERS = ("<tool_call>", "</tool_call>")


def build_scripted_caller(path: Path, pieces: list[str], max_positions: int = 4096,
                          corpus: Sequence[str] = (), vocab: int = 400) -> Path:
    """A model in `path` that answers any chat with `pieces` (then ends);
    `corpus`, `vocab`: its tokenizer's (tests/tiny_model.py build_tokenizer)."""
    extra = MARKERS + tuple(p for p in dict.fromkeys(pieces) if p not in MARKERS)
    hidden = max(64, 32 * ((len(pieces) + 2) // 32 + 1))  # one direction per script token
    return build_scripted_model(path, "".join(pieces), QWEN25_TOOLS, hidden=hidden,
                                max_positions=max_positions, extra_tokens=extra,
                                corpus=corpus, vocab=vocab)


def call_pieces(name: str, arguments: list[str]) -> list[str]:
    """One call of `name`, its arguments' JSON text in `arguments` pieces."""
    return ["<tool_call>", f'\n{{"name":"{name}","arguments":', *arguments, "}\n",
            "</tool_call>"]
