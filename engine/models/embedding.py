"""Embedding models (issue 35): BERT-style encoders (BERT, RoBERTa,
XLM-RoBERTa: all-MiniLM, bge, e5, gte and their kin) loaded our own way on
MLX, since the one embedding library on the registry (mlx-embeddings 0.1.0)
imports mlx_vlm, which Tandem does not carry. Its BERT is the reference the
suite checks these vectors against (tests/test_embeddings.py).

A folder (or a Hugging Face repo id, from the local cache or downloaded):
config.json, *.safetensors, the tokenizer, and sentence-transformers'
pooling (1_Pooling/config.json: CLS or mean; modules.json: normalized or
not; default: mean, normalized). An input is cut to the model's
`max_seq_length` tokens, [CLS] and [SEP] included, as sentence-transformers
cuts it (sentence_bert_config.json; else the smaller of the tokenizer's
model_max_length and the encoder's positions): all-MiniLM-L6-v2 reads 256
tokens of an input, though its encoder has 512 positions. The config is checked before anything is
built (config_check.py). `embed` runs a padded batch through the encoder in
the caller's stream (a lane thread's: engine/runtime/embed.py), attention
fused (`mx.fast.scaled_dot_product_attention`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn

from ..core.errors import EngineError

ENCODERS = ("bert", "roberta", "xlm-roberta")


class _Layer(nn.Module):
    def __init__(self, dims: int, heads: int, hidden: int, eps: float):
        super().__init__()
        self.heads, self.eps = heads, eps
        self.query, self.key, self.value = (nn.Linear(dims, dims) for _ in range(3))
        self.out = nn.Linear(dims, dims)
        self.norm1, self.norm2 = nn.LayerNorm(dims, eps=eps), nn.LayerNorm(dims, eps=eps)
        self.up, self.down = nn.Linear(dims, hidden), nn.Linear(hidden, dims)

    def __call__(self, x: mx.array, mask: mx.array) -> mx.array:
        b, n, d = x.shape
        h = self.heads

        def split(t):
            return t.reshape(b, n, h, d // h).transpose(0, 2, 1, 3)

        attn = mx.fast.scaled_dot_product_attention(
            split(self.query(x)), split(self.key(x)), split(self.value(x)),
            scale=1.0 / math.sqrt(d // h), mask=mask)
        x = self.norm1(x + self.out(attn.transpose(0, 2, 1, 3).reshape(b, n, d)))
        return self.norm2(x + self.down(nn.gelu(self.up(x))))


class Encoder(nn.Module):
    """A BERT-style encoder: token, position and type embeddings, post-norm layers."""

    def __init__(self, config: dict):
        super().__init__()
        dims, eps = config["hidden_size"], float(config.get("layer_norm_eps", 1e-12))
        self.roberta = config["model_type"] != "bert"
        self.pad_id = int(config.get("pad_token_id", 1 if self.roberta else 0) or 0)
        self.word = nn.Embedding(config["vocab_size"], dims)
        self.position = nn.Embedding(config["max_position_embeddings"], dims)
        self.type = nn.Embedding(max(int(config.get("type_vocab_size", 2)), 1), dims)
        self.norm = nn.LayerNorm(dims, eps=eps)
        self.layers = [_Layer(dims, config["num_attention_heads"], config["intermediate_size"],
                              eps) for _ in range(config["num_hidden_layers"])]

    def __call__(self, ids: mx.array, valid: mx.array) -> mx.array:
        """Hidden states of a padded batch; `valid` (batch, n) is 1 on real tokens."""
        if self.roberta:  # positions count real tokens from pad_id + 1
            positions = (mx.cumsum(valid, axis=1) * valid + self.pad_id).astype(mx.int32)
        else:
            positions = mx.arange(ids.shape[1])[None]
        x = self.norm(self.word(ids) + self.position(positions)
                      + self.type(mx.zeros_like(ids)))
        mask = ((1.0 - valid.astype(x.dtype)) * -1e9)[:, None, None, :]
        for layer in self.layers:
            x = layer(x, mask)
        return x


@dataclass
class EmbeddingModel:
    encoder: Encoder
    tokenizer: object  # a transformers fast tokenizer
    name: str
    source: str
    dims: int
    max_tokens: int  # longer inputs are cut to this (max_seq_length: _max_tokens)
    pooling: str  # "mean" or "cls"
    normalize: bool
    weight_bytes: int
    lowercase: bool = False  # sentence_bert_config.json's do_lower_case

    def encode(self, text: str) -> list[int]:
        """Its token ids, cut to max_tokens with [CLS] and [SEP] kept (as
        sentence-transformers tokenizes)."""
        text = text.lower() if self.lowercase else text
        ids = self.tokenizer(text, truncation=True, max_length=self.max_tokens)["input_ids"]
        return list(ids)

    def check_ids(self, ids: list[int]) -> list[int]:
        """Token ids given by a client: within the vocabulary, cut to max_tokens."""
        vocab = self.encoder.word.weight.shape[0]
        ids = ids[:self.max_tokens]  # what is cut is never read: never checked either
        if ids and (min(ids) < 0 or max(ids) >= vocab):
            raise EngineError(f"a token id is outside the vocabulary (0-{vocab - 1}).",
                              "bad-argument")
        return ids

    def embed(self, batch: list[list[int]]) -> mx.array:
        """(len(batch), dims) float32 vectors of token-id lists (not empty)."""
        n = max(len(ids) for ids in batch)
        pad = self.encoder.pad_id
        ids = mx.array([row + [pad] * (n - len(row)) for row in batch], dtype=mx.int32)
        valid = mx.array([[1] * len(row) + [0] * (n - len(row)) for row in batch],
                         dtype=mx.float32)
        hidden = self.encoder(ids, valid).astype(mx.float32)
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            pooled = (hidden * valid[..., None]).sum(axis=1) / mx.maximum(
                valid.sum(axis=1, keepdims=True), 1.0)
        if self.normalize:
            pooled = pooled / mx.maximum(mx.linalg.norm(pooled, axis=-1, keepdims=True), 1e-9)
        return pooled


def load_embedding_model(source: str) -> EmbeddingModel:
    """A BERT-style encoder from a folder or a repo id; EngineError naming
    what is wrong for anything else."""
    path = _resolve(source)
    config = _config(path)
    encoder = Encoder(config)
    weights = {}
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise EngineError(f"{path.name}: no .safetensors weights (convert the model, or "
                          "pick one published with safetensors).", "not-a-model")
    for file in files:
        weights.update(mx.load(str(file)))
    encoder.load_weights(list(_renamed(weights, config).items()), strict=True)
    mx.eval(encoder.parameters())
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    except Exception as e:
        raise EngineError(f"{path.name}: its tokenizer cannot be loaded ({e}).",
                          "corrupt-model") from None
    pooling, normalize = _pooling(path)
    return EmbeddingModel(encoder, tokenizer, path.name if Path(source).is_dir() else source,
                          source, config["hidden_size"], _max_tokens(path, config, tokenizer),
                          pooling, normalize, sum(v.nbytes for v in weights.values()),
                          _module_setting(path, "do_lower_case") is True)


def _max_tokens(path: Path, config: dict, tokenizer) -> int:
    """How many tokens of an input are read, as sentence-transformers reads
    them: the Transformer module's sentence_bert_config.json max_seq_length,
    else the tokenizer's model_max_length; never more than the encoder's
    positions (RoBERTa's start 2 late)."""
    offset = 2 if config["model_type"] != "bert" else 0
    limit = int(config["max_position_embeddings"]) - offset
    wanted = _module_setting(path, "max_seq_length")
    if not (isinstance(wanted, int) and not isinstance(wanted, bool) and wanted >= 1):
        wanted = getattr(tokenizer, "model_max_length", None)
    if isinstance(wanted, int) and 1 <= wanted:  # (model_max_length may be ~1e30: "none")
        limit = min(limit, wanted)
    return limit


def _module_setting(path: Path, name: str):
    """A setting of sentence-transformers' Transformer module (its folder's
    sentence_bert_config.json; modules.json says which folder), or None."""
    folder = ""
    try:
        modules = json.loads((path / "modules.json").read_text())
        folder = next((str(m.get("path") or "") for m in modules
                       if "Transformer" in str(m.get("type"))), "")
    except (OSError, ValueError, AttributeError, TypeError):
        pass
    try:
        settings = json.loads((path / folder / "sentence_bert_config.json").read_text())
    except (OSError, ValueError):
        return None
    return settings.get(name) if isinstance(settings, dict) else None


def _resolve(source: str) -> Path:
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    if path.exists() or "/" not in source or source.count("/") != 1:
        raise EngineError(f"Embedding model not found: '{source}' is neither a model folder "
                          "nor a Hugging Face repo id (owner/name).", "model-not-found")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(source, allow_patterns=[
            "*.json", "*.safetensors", "*.txt", "*.model", "1_Pooling/*"]))
    except Exception as e:
        raise EngineError(f"Cannot get {source} from Hugging Face (offline, not cached, or "
                          f"not a model repo): {e}", "download-failed") from None


def _config(path: Path) -> dict:
    from .config_check import check_config, check_fits

    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EngineError(f"{path} is not a model folder (no config.json).",
                          "not-a-model") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise EngineError(f"{path.name}: config.json is not valid JSON ({e}).",
                          "corrupt-model") from None
    if not isinstance(config, dict) or config.get("model_type") not in ENCODERS:
        kind = config.get("model_type") if isinstance(config, dict) else None
        raise EngineError(f"{path.name} is a {kind!r} model, not an embedding encoder Tandem "
                          f"loads ({', '.join(ENCODERS)}: all-MiniLM, bge, e5, gte...).",
                          "unsupported-architecture")
    check_config(config, path.name)
    if config["hidden_size"] % config["num_attention_heads"]:
        raise EngineError(f"{path.name}: hidden_size is not a multiple of the heads.",
                          "corrupt-model")
    check_fits(sum(f.stat().st_size for f in path.glob("*.safetensors")), path.name)
    return config


def _renamed(weights: dict, config: dict) -> dict:
    """Hugging Face's names (with or without the bert. / roberta. prefix) -> ours."""
    out = {}
    for name, value in weights.items():
        for prefix in ("bert.", "roberta.", "model."):
            name = name.removeprefix(prefix)
        if name.startswith(("pooler.", "cls.", "lm_head.")) or "position_ids" in name:
            continue
        name = (name.replace("embeddings.word_embeddings", "word")
                .replace("embeddings.position_embeddings", "position")
                .replace("embeddings.token_type_embeddings", "type")
                .replace("embeddings.LayerNorm", "norm")
                .replace("encoder.layer.", "layers.")
                .replace("attention.self.query", "query").replace("attention.self.key", "key")
                .replace("attention.self.value", "value")
                .replace("attention.output.dense", "out")
                .replace("attention.output.LayerNorm", "norm1")
                .replace("intermediate.dense", "up").replace("output.dense", "down")
                .replace("output.LayerNorm", "norm2"))
        out[name] = value
    return out


def _pooling(path: Path) -> tuple[str, bool]:
    """sentence-transformers' pooling and normalization (mean, normalized by default)."""
    pooling, normalize = "mean", True
    try:
        modules = json.loads((path / "modules.json").read_text())
        normalize = any("Normalize" in str(m.get("type", "")) for m in modules)
        pool_dir = next((m.get("path") for m in modules if "Pooling" in str(m.get("type"))),
                        "1_Pooling")
        pool = json.loads((path / str(pool_dir) / "config.json").read_text())
        if pool.get("pooling_mode_cls_token"):
            pooling = "cls"
    except (OSError, ValueError, AttributeError, StopIteration):
        pass
    return pooling, normalize
