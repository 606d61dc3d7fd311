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

Families: SmolVLM and Idefics3 (plain RoPE), and Qwen2-VL / Qwen2.5-VL
(M-RoPE: `MRopeVisionModel`). mlx-vlm keeps Qwen's M-RoPE position state on
the model object (one request at a time); here it travels with each request
instead: the processor's positions for its prompt and its rope delta (how
far its text positions run behind its token count, the images' tokens
sharing positions) are in its VisionInputs, a prefill chunk reads its slice,
and a decode step gives each row its position from its cache offset plus
its delta (`row_kwargs`: text rows 0), so image and text requests batch,
chunk, hit the prefix cache and move between lanes. Any other vision type
is refused naming it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn

from ..core.errors import EngineError
from .vision_kinds import MAX_ASPECT, MROPE, SERVED



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
        "Qwen3-VL and Gemma 3 through mlx-lm.", "unsupported-model")


@dataclass(eq=False)
class VisionInputs:
    """A request's images, as its model reads them: the prompt's real ids
    (image tokens where the images go), the processor's pixel arrays, and
    the prompt's embeddings with the images' features merged in, computed
    once on the lane that prefills it."""

    model_ids: list[int]
    pixels: dict = field(repr=False)
    images: int
    embeddings: object = field(default=None, repr=False)
    # M-RoPE (Qwen2-VL, Qwen2.5-VL): the prompt's positions (3, 1, n), made
    # with the embeddings and dropped with them, and the rope delta, kept
    # for decoding (a text position is its index plus the delta).
    positions: object = field(default=None, repr=False)
    rope_delta: int = 0
    # Where each image's tokens end in the prompt, and the first position
    # `embeddings` holds: a prefill that starts past every image (its KV
    # found in the prefix cache) embeds its text alone, with no vision tower.
    image_ends: tuple[int, ...] = ()
    embedded_from: int = 0

    def images_from(self, position: int) -> int:
        """How many images have tokens at or after `position` (those a
        prefill from there encodes)."""
        return sum(1 for end in self.image_ends if end > position)

    def embeds(self, model, start: int, n: int) -> mx.array:
        """The prompt's embeddings for positions [start, start + n), made by
        `model.embed` from `start` (again if they were made from later)."""
        if self.embeddings is not None and start < self.embedded_from:
            self.embeddings = self.positions = None
        embeddings = model.embed(self, start)
        return embeddings[:, start - self.embedded_from: start - self.embedded_from + n]


class VisionTextModel(nn.Module):
    """An mlx-vlm model as a lane runs a text model."""

    reads_images = True  # Engine.capabilities.images

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

    def embed(self, vision: VisionInputs, start: int = 0) -> mx.array:
        """The prompt's embeddings with its images' features merged in (1, n,
        hidden), computed once and kept with the request; from `start` on,
        text only, when every image ends before it (VisionInputs.embeds)."""
        if vision.embeddings is None:
            ids = mx.array([vision.model_ids])
            past = _past_images(vision, start)
            features = (self.vlm.get_input_embeddings(ids[:, start:]) if past
                        else self.vlm.get_input_embeddings(ids, **vision.pixels))
            vision.embeddings, vision.embedded_from = features.inputs_embeds, start if past else 0
        return vision.embeddings


def _past_images(vision: VisionInputs, start: int) -> bool:
    """Whether a prefill from `start` has no image left to encode."""
    return start > 0 and bool(vision.image_ends) and vision.images_from(start) == 0


class MRopeVisionModel(VisionTextModel):
    """Qwen2-VL / Qwen2.5-VL: the language model called with explicit M-RoPE
    positions, each request's own (never mlx-vlm's per-model state)."""

    def embed(self, vision: VisionInputs, start: int = 0) -> mx.array:
        if vision.embeddings is None:
            ids = mx.array([vision.model_ids])
            if _past_images(vision, start):  # positions from the image grid, no tower
                grid = mx.array(vision.pixels["image_grid_thw"])
                positions, deltas = self.language.get_rope_index(ids, grid, None, None)
                vision.embeddings = self.language.model.embed_tokens(ids[:, start:])
                vision.embedded_from = start
            else:
                features = self.vlm.get_input_embeddings(ids, **vision.pixels)
                vision.embeddings, positions = features.inputs_embeds, features.position_ids
                deltas, vision.embedded_from = features.rope_deltas, 0
            vision.positions = positions
            vision.rope_delta = int(deltas.reshape(-1)[0].item())
        return vision.embeddings

    @staticmethod
    def row_kwargs(requests: list) -> dict:
        """A decode step's per-row state: each row's rope delta (text rows 0)."""
        deltas = [r.vision.rope_delta if r.vision is not None else 0 for r in requests]
        return {"rope_deltas": mx.array(deltas)} if any(deltas) else {}

    def __call__(self, inputs: mx.array, cache=None, input_embeddings: mx.array | None = None,
                 rope_deltas: mx.array | None = None, positions: mx.array | None = None):
        language = self.language
        batch, length = inputs.shape
        if positions is None:  # text: each row from its own offset (a batch cache's is (B,))
            offset = cache[0].offset if cache is not None and cache[0] is not None else 0
            if isinstance(offset, mx.array) and offset.ndim:
                offset = offset[:, None]
            ids = mx.arange(length)[None, :] + offset
            if rope_deltas is not None:
                ids = ids + rope_deltas[:, None]
            positions = mx.broadcast_to(ids[None], (3, batch, length))
        h = language.model(inputs, inputs_embeds=input_embeddings, cache=cache,
                           position_ids=positions)
        if language.args.tie_word_embeddings:
            return language.model.embed_tokens.as_linear(h)
        return language.lm_head(h)


def image_messages(messages: list[dict]) -> list[dict]:
    """Messages as the processor's chat template takes them: a message with
    images has its parts in order ({"type": "image"} / {"type": "text"})."""
    out = []
    for m in messages:
        parts = m.get("parts")
        content = [{"type": "image"} if p["type"] == "image" else
                   {"type": "text", "text": p["text"]} for p in parts] if parts else m["content"]
        out.append({k: v for k, v in m.items() if k not in ("images", "parts", "content")}
                   | {"content": content})
    return out


# One image as a vision model reads it: at most ~1 megapixel (Ollama's limit for
# Qwen2.5-VL: 1,280 image tokens). A checkpoint's processor may allow far more
# (Qwen2.5-VL's: 12.8 MP, 16,384 tokens), and its vision tower's full-attention
# blocks hold a patches x patches score matrix per head: a 4K screenshot (42k
# patches) would ask ~100 GB of the CPU's memory. Larger images are scaled down
# (aspect kept) before the processor; their cache keys stay their own digest.
MODEL_MAX_PIXELS = 1280 * 28 * 28


def model_view(image):
    """`image` (PIL) scaled down to at most MODEL_MAX_PIXELS, aspect kept:
    within MAX_ASPECT (images.py refuses past it) however the sides round."""
    from PIL import Image

    width, height = image.size
    if width * height <= MODEL_MAX_PIXELS:
        return image
    scale = (MODEL_MAX_PIXELS / (width * height)) ** 0.5
    size = [max(1, int(width * scale)), max(1, int(height * scale))]
    short = size.index(min(size))
    size[short] = max(size[short], -(-size[1 - short] // MAX_ASPECT))
    return image.resize(tuple(size), Image.Resampling.BICUBIC, reducing_gap=3.0)


def render_with_images(model: VisionTextModel, messages: list[dict], vocab: int,
                       specials: list[str], tools: list[dict] | None = None,
                       continue_from: str | None = None) -> tuple[list[int], VisionInputs]:
    """A chat with images: (its prefix-cache key ids, its VisionInputs).

    The key ids are the prompt's ids with each image token replaced by an id
    past the vocabulary derived from its image's digest and its place in
    it: the same image (and the text before it) is a prefix-cache hit, a
    different image of the same size is not. `tools` are offered through the
    processor's chat template (refused, saying so, where that template does
    not show them); `continue_from`, an interrupted answer, is appended to
    be written further. Text that spells a control token (a message, a tool
    definition or call, the answer continued) is refused: with images the
    processor tokenizes the template's output whole."""
    from ..core.errors import EngineError
    from .tools import template_messages

    processor = model.processor
    images = [image for m in messages for image in m.get("images") or ()]
    for i, m in enumerate(messages, start=1):
        texts = [p.get("text", "") for p in m.get("parts") or ()] or [m.get("content") or ""]
        hit = next((s for t in texts for s in specials if s and s in t), None)
        if hit is not None:
            raise EngineError(f"Message {i} contains {hit!r}, one of the model's control "
                              "tokens; remove it to send images with it.", "bad-argument")
    shown = image_messages(template_messages(messages))
    spelled = json.dumps([tools, [m.get("tool_calls") for m in shown], continue_from],
                         ensure_ascii=False, default=str)
    hit = next((s for s in specials if s and s in spelled), None)
    if hit is not None:
        raise EngineError(f"A tool definition or call, or the answer continued, contains "
                          f"{hit!r}, one of the model's control tokens; remove it.",
                          "bad-argument")
    try:
        prompt = processor.apply_chat_template(shown, add_generation_prompt=True,
                                               tokenize=False,
                                               **({"tools": tools} if tools else {}))
        if tools and prompt == processor.apply_chat_template(
                shown, add_generation_prompt=True, tokenize=False):
            raise EngineError("This model's chat template does not offer tools beside "
                              "images; turn tools off to send images.", "bad-argument")
    except EngineError:
        raise
    except Exception as e:
        raise EngineError(f"Cannot apply the chat template: {e}", "bad-argument") from e
    token = getattr(processor, "image_token", "<image>")
    if prompt.count(token) != len(images):
        raise EngineError(f"The chat template placed {prompt.count(token)} images for "
                          f"{len(images)} sent.", "bad-argument")
    pixels = [model_view(image.pixels) for image in images]
    inputs = processor(text=[prompt], images=[pixels], return_tensors="np")
    model_ids = [int(t) for t in inputs["input_ids"][0].tolist()]
    if continue_from:  # tokenized apart, as a text chat's continued answer is
        model_ids += list(processor.tokenizer.encode(continue_from, add_special_tokens=False))
    image_id = processor.image_token_id
    grid = inputs.get("image_grid_thw")
    merge = getattr(getattr(processor, "image_processor", None), "merge_size", None)
    if grid is not None and merge:  # Qwen: each image's tokens from its patch grid
        counts = [int(t * h * w) // (merge * merge) for t, h, w in grid.tolist()]
    else:  # each image through the processor alone (SmolVLM: its tiles' tokens)
        counts = [int((processor(text=[token], images=[[p]], return_tensors="np")["input_ids"]
                       == image_id).sum()) for p in pixels]
    if sum(counts) != model_ids.count(image_id):
        raise EngineError("The images' tokens do not add up; this model's processor is not "
                          "supported yet.", "unsupported-model")
    keys, at, ends = [], 0, [0] * len(images)
    owner = [k for k, n in enumerate(counts) for _ in range(n)]
    for i, token_id in enumerate(model_ids):
        if token_id == image_id:
            k = owner[at]
            ends[k] = i + 1
            place = at - sum(counts[:k])
            # the image's own pixels, and the size the model read them at (a
            # cap changed in a later version must not find this KV on disk)
            seen = f"{images[k].digest}:{pixels[k].size[0]}x{pixels[k].size[1]}:{place}"
            digest = hashlib.blake2b(seen.encode(), digest_size=8)
            keys.append(vocab + int.from_bytes(digest.digest(), "big") % (1 << 24))
            at += 1
        else:
            keys.append(token_id)
    arrays = {k: v for k, v in inputs.items() if k in ("pixel_values", "pixel_attention_mask",
                                                         "image_grid_thw")}
    return keys, VisionInputs(model_ids, arrays, len(images), image_ends=tuple(ends))


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
    kind = VisionTextModel if config.get("model_type") not in MROPE else MRopeVisionModel
    return kind(vlm, processor), tokenizer, config
