"""Vision models (issue 37): loaded through mlx-vlm (its model classes, its
processors), served by the lanes as the text models they run.

`VisionTextModel` wraps an mlx-vlm model so that a lane sees what it sees in
an mlx-lm model: `model(ids, cache=, input_embeddings=)` gives logits through
the language model, `make_cache()` gives mlx-lm's own `KVCache` per layer
(the language models of these families use only `update_and_fetch`,
`offset` and `make_mask`, which mlx-lm's batch caches provide), so decode
joins the lane's continuous batch like any text request, prefix caching and
moves between lanes included. Its parameters are the whole model's: the
memory plan counts the vision tower.

Families: a model type mlx-lm cannot load whose config has a vision tower
goes through here (SmolVLM, Idefics3). Qwen2.5-VL keeps M-RoPE position
state on the model object, so it stays on mlx-lm's text path (which loads
its language model) until that state travels with each request. Any other
vision type is refused naming it."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn

from ..core.errors import EngineError

SERVED = {"smolvlm": "SmolVLM", "idefics3": "Idefics3"}
# Vision families whose language model mlx-lm loads (text only, for now).
TEXT_VIA_MLX_LM = {"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "gemma3", "kimi_vl",
                   "lfm2-vl"}


def vision_type(path: Path) -> str | None:
    """The model type of a folder whose config has a vision tower, else None."""
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(config, dict) or not isinstance(config.get("vision_config"), dict):
        return None
    kind = config.get("model_type")
    return kind if isinstance(kind, str) else None


def served_here(kind: str | None) -> bool:
    """Whether a vision model of this type loads through mlx-vlm here."""
    return kind in SERVED


def refusal(kind: str) -> EngineError:
    return EngineError(
        f"'{kind}' is a vision model Tandem cannot run yet: it serves "
        f"{', '.join(SERVED.values())} through mlx-vlm, and reads the language model of "
        "Qwen2-VL / Qwen2.5-VL / Qwen3-VL and Gemma 3 through mlx-lm.", "unsupported-model")


class VisionTextModel(nn.Module):
    """An mlx-vlm model as a lane runs a text model."""

    def __init__(self, vlm: nn.Module, processor=None):
        super().__init__()
        self.vlm = vlm
        self.processor = processor  # not a module: its tokenizer and image processor
        self.model_type = getattr(getattr(vlm, "config", None), "model_type", "vision")

    @property
    def language(self) -> nn.Module:
        return self.vlm.language_model

    @property
    def layers(self) -> list:
        language = self.language
        return language.layers if hasattr(language, "layers") else language.model.layers

    def make_cache(self) -> list:
        from mlx_lm.models.cache import KVCache

        return [KVCache() for _ in self.layers]

    def __call__(self, inputs: mx.array, cache=None, input_embeddings: mx.array | None = None):
        out = self.language(inputs, inputs_embeds=input_embeddings, cache=cache)
        return getattr(out, "logits", out)


def load_vision(source: str):
    """(VisionTextModel, its tokenizer as mlx-lm wraps one, the config dict)
    of a folder mlx-vlm serves; EngineError for what a user can get wrong."""
    from mlx_lm.tokenizer_utils import load as load_tokenizer
    from mlx_vlm.utils import load

    config = json.loads((Path(source) / "config.json").read_text(encoding="utf-8"))
    eos = config.get("eos_token_id")
    try:
        vlm, processor = load(source)
        tokenizer = load_tokenizer(Path(source), eos_token_ids=(
            eos if isinstance(eos, list) else [eos] if isinstance(eos, int) else None))
    except Exception as e:
        raise EngineError(f"Cannot load {source} with mlx-vlm ({type(e).__name__}: {e}).",
                          "corrupt-model") from e
    return VisionTextModel(vlm, processor), tokenizer, config
