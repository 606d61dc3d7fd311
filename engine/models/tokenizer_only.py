"""A model's tokenizer without its weights, and whether the model has a chat
template: for checks made before a load spends its time on the weights (a
base model, asked to chat, is refused at once) and for what needs only the
template (the tools that would fit: `tandem generate --list-tools`).

Sources are named as `load_model` takes them: 'default', a GGUF file, a model
folder or a Hugging Face repo id (its tokenizer files only are fetched)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import EngineError
from .chat_template import has_chat_template

# Files that carry a chat template in a Hugging Face folder (transformers 4.43+
# writes chat_template.jinja; processors chat_template.json).
TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")
TOKENIZER_FILES = ["*.json", "*.py", "tokenizer.model", "*.tiktoken", "tiktoken.model",
                   "*.txt", "*.jsonl", "*.jinja"]  # as mlx-lm fetches a tokenizer


@dataclass(slots=True)
class ModelTokenizer:
    """A model's tokenizer (mlx-lm's wrapper, as a load gives it) and its context."""

    tokenizer: object
    context_length: int
    label: str


def context_length_of(config: dict) -> int:
    """A Hugging Face config's context length, as the loader reads it."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    return int(config.get("max_position_embeddings") or text.get("max_position_embeddings")
               or config.get("max_seq_len") or 4096)


def load_tokenizer(source: str) -> ModelTokenizer:
    """The tokenizer of `source`, its weights left unread; EngineError if it
    cannot be had."""
    kind, path = _resolve(source)
    try:
        if kind == "gguf":
            return _gguf_tokenizer(path)
        folder = path if kind == "folder" else _hub_folder(source, download=True)
        from mlx_lm.utils import load_tokenizer as mlx_tokenizer

        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        return ModelTokenizer(mlx_tokenizer(folder), context_length_of(config),
                              path.name if kind == "folder" else source)
    except EngineError:
        raise
    except Exception as e:
        raise EngineError(f"Cannot read the tokenizer of {source}: {type(e).__name__}: {e}",
                          "corrupt-model") from e


def declares_chat_template(source: str) -> bool | None:
    """Whether `source` has a chat template, found without loading its
    weights (a GGUF's metadata, a folder's files, else its tokenizer); None
    when that cannot be told now (a repo id not in the cache, a damaged
    file: the load says what is wrong)."""
    try:
        kind, path = _resolve(source)
        if kind == "gguf":
            from .gguf.check import validate_gguf
            from .gguf.meta import read_metadata

            validate_gguf(path)
            return bool(read_metadata(path).get("tokenizer.chat_template"))
        folder = path if kind == "folder" else _hub_folder(source, download=False)
        if folder is None:
            return None
        if _template_in_files(folder):
            return True
        return has_chat_template(load_tokenizer(str(folder)).tokenizer)
    except Exception:  # the load itself reports the problem, in its words
        return None


def _resolve(source: str) -> tuple[str, Path]:
    """("gguf" | "folder" | "repo", path), as load_model tells sources apart."""
    from .loader import DEFAULT_MODEL, default_model_path

    if source == DEFAULT_MODEL:
        return "gguf", default_model_path()
    path = Path(source).expanduser()
    if path.suffix.lower() == ".gguf" or path.is_file():
        if not path.exists():
            raise EngineError(f"Model file not found: {path}", "model-not-found")
        return "gguf", path
    if path.is_dir():
        if not (path / "config.json").exists():
            raise EngineError(f"{path} is not a model folder (no config.json).", "not-a-model")
        return "folder", path
    return "repo", path


def _hub_folder(repo_id: str, download: bool) -> Path | None:
    """A repo's snapshot folder with its tokenizer files (fetched if
    `download`, else only a cached one: None when there is none)."""
    from huggingface_hub import snapshot_download, try_to_load_from_cache

    if download:
        return Path(snapshot_download(repo_id, allow_patterns=TOKENIZER_FILES))
    found = try_to_load_from_cache(repo_id, "config.json")
    return Path(found).parent if isinstance(found, str) else None


def _template_in_files(folder: Path) -> bool:
    """A chat template named by the folder's files, read as text (the
    tokenizer is loaded only when none is)."""
    if any((folder / name).is_file() for name in TEMPLATE_FILES):
        return True
    if any((folder / "additional_chat_templates").glob("*.jinja")):
        return True
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and bool(config.get("chat_template")
                                             or config.get("chat_template_type"))


def _gguf_tokenizer(path: Path) -> ModelTokenizer:
    from mlx_lm.tokenizer_utils import TokenizerWrapper

    from .gguf.check import validate_gguf
    from .gguf.convert import model_config
    from .gguf.meta import read_metadata
    from .gguf.tokenizer import build_tokenizer
    from .loader import _stop_ids

    validate_gguf(path)
    metadata = read_metadata(path)
    config = model_config(metadata)
    hf_tokenizer = build_tokenizer(metadata)
    return ModelTokenizer(TokenizerWrapper(hf_tokenizer,
                                           eos_token_ids=_stop_ids(hf_tokenizer)),
                          config["max_position_embeddings"], path.stem)
