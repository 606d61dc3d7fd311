"""A model's own sampling defaults, as LM Studio and Ollama use them: from
its generation_config.json (a model folder) or its GGUF metadata
(`general.sampling.*`), each field that is missing or out of range falling
back to settings that keep a small model from looping (a repetition penalty
included). `SamplingParams()` itself stays greedy: these are what the app
gives a new chat and the server a request that leaves a field out.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

# When the model says nothing: LM Studio's and llama.cpp's usual choices.
FALLBACK = {"temperature": 0.7, "top_p": 0.95, "top_k": 40, "min_p": 0.05,
            "repetition_penalty": 1.1}
# Accepted ranges; a value outside is ignored (the fallback is used).
RANGES = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0), "top_k": (0, 1000),
          "min_p": (0.0, 1.0), "repetition_penalty": (1.0, 2.0)}
GGUF_KEYS = {"temperature": "general.sampling.temp", "top_p": "general.sampling.top_p",
             "top_k": "general.sampling.top_k", "min_p": "general.sampling.min_p",
             "repetition_penalty": "general.sampling.penalty_repeat"}
MAX_FILE_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class GenerationDefaults:
    temperature: float = FALLBACK["temperature"]
    top_p: float = FALLBACK["top_p"]
    top_k: int = FALLBACK["top_k"]
    min_p: float = FALLBACK["min_p"]
    repetition_penalty: float = FALLBACK["repetition_penalty"]
    source: str = "Tandem's defaults (the model names none)"

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "source"}


def _valid(name: str, value) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value):
        return None
    low, high = RANGES[name]
    if not low <= value <= high:
        return None
    return int(value) if name == "top_k" else float(value)


def from_values(values: dict, source: str) -> GenerationDefaults:
    """Defaults from a mapping of field -> value; invalid or missing fields
    fall back, and `source` says where the others came from."""
    picked = {}
    for name in FALLBACK:
        value = _valid(name, values.get(name))
        if value is not None:
            picked[name] = value
    if not picked:
        return GenerationDefaults()
    return GenerationDefaults(**picked, source=source)


def from_folder(path: Path) -> GenerationDefaults:
    """generation_config.json beside the model (do_sample false: greedy)."""
    file = Path(path) / "generation_config.json"
    try:
        if file.stat().st_size > MAX_FILE_BYTES:
            return GenerationDefaults()
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return GenerationDefaults()
    if not isinstance(data, dict):
        return GenerationDefaults()
    if data.get("do_sample") is False:
        data = {**data, "temperature": 0.0}
    return from_values(data, "the model's generation_config.json")


def from_gguf(metadata: dict) -> GenerationDefaults:
    """GGUF `general.sampling.*` metadata (llama.cpp's keys)."""
    values = {name: metadata.get(key) for name, key in GGUF_KEYS.items()}
    return from_values(values, "the GGUF file's sampling metadata")
