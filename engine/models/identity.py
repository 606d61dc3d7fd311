"""A model's identity for KV kept on disk (issue 33): what its keys and
values depend on, cheap to compute at every load. The weights' files
(names, sizes, modification times: a re-downloaded or re-quantized model is
another model) and the tokenizer's vocabulary (a hash). The KV dtype is not
in it: each file records its own and is cast on load, as the RAM prefix
cache casts between lanes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

WEIGHT_SUFFIXES = {".gguf", ".safetensors", ".json", ".npz"}


def model_identity(loaded) -> str:
    """A short, stable string naming `loaded`'s weights and tokenizer."""
    from .loader import DEFAULT_MODEL, default_model_path

    source = loaded.source
    path = default_model_path() if source == DEFAULT_MODEL else Path(str(source)).expanduser()
    files = ([path] if path.is_file() else
             sorted(p for p in path.iterdir() if p.suffix in WEIGHT_SUFFIXES)
             if path.is_dir() else [])
    weights = [f"{f.name}:{f.stat().st_size}:{int(f.stat().st_mtime)}" for f in files]
    inner = getattr(loaded.tokenizer, "_tokenizer", loaded.tokenizer)
    vocab = json.dumps(sorted(inner.get_vocab().items())).encode()
    digest = hashlib.sha256(json.dumps([str(source), weights]).encode() + vocab).hexdigest()
    return f"{loaded.name or loaded.label}:{digest[:32]}"
