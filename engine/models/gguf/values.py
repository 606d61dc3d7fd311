"""GGUF metadata values as plain Python.

The two readers return the same file differently: `mx.load` gives numbers and
numeric arrays as MLX arrays, engine/models/gguf/meta.py's walk gives numbers
as Python scalars and numeric arrays as lists. Code that reads metadata takes
it through `plain_metadata` first, so a numeric array (the SentencePiece
scores, the token types) is a list whatever read it: `or`, truthiness and
`list()` on an array raise or mislead.
"""

from __future__ import annotations

from typing import Any


def plain(value: Any) -> Any:
    """An MLX or numpy array (or numpy scalar) as a list (or Python scalar);
    anything else as it is."""
    return value.tolist() if hasattr(value, "tolist") else value


def plain_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """Every value of `metadata` through `plain` (a new dict)."""
    return {key: plain(value) for key, value in metadata.items()}
