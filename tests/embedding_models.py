"""Tiny random BERT-style embedding models for tests (issue 35): a WordPiece
tokenizer trained on the test corpus, Hugging Face's weight names (with the
pooler a full checkpoint carries), and sentence-transformers' pooling files.
`reference_bert()` is mlx-embeddings' own BERT class, imported without the
package's top module (which imports mlx_vlm, not installed)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import mlx.core as mx

from tests.tiny_model import CORPUS

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def build_bert(path: Path, layers: int = 2, hidden: int = 64, heads: int = 4,
               pooling: str = "mean", normalize: bool = True, seed: int = 0,
               model_type: str = "bert", positions: int = 130,
               max_seq_length: int | None = None, model_max_length: int | None = None,
               cased: bool = False, do_lower_case: bool = False) -> Path:
    """`max_seq_length`: written to sentence_bert_config.json (with
    `do_lower_case`), as sentence-transformers' own folders have it
    (all-MiniLM-L6-v2: 256, its encoder's positions and tokenizer 512)."""
    from tokenizers import BertWordPieceTokenizer
    from transformers import PreTrainedTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    from tokenizers import processors

    wordpiece = BertWordPieceTokenizer(lowercase=not cased)
    wordpiece.train_from_iterator(CORPUS, vocab_size=300, special_tokens=SPECIAL)
    # [CLS] ... [SEP] around each input, as a published BERT tokenizer.json has it.
    inner = wordpiece._tokenizer
    inner.post_processor = processors.BertProcessing(
        ("[SEP]", inner.token_to_id("[SEP]")), ("[CLS]", inner.token_to_id("[CLS]")))
    fast = PreTrainedTokenizerFast(tokenizer_object=wordpiece._tokenizer, unk_token="[UNK]",
                                   sep_token="[SEP]", cls_token="[CLS]", pad_token="[PAD]",
                                   mask_token="[MASK]",
                                   model_max_length=model_max_length or positions - 2)
    fast.save_pretrained(path)
    vocab = len(fast)
    config = {"model_type": model_type, "architectures": ["BertModel"], "vocab_size": vocab,
              "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
              "intermediate_size": hidden * 4, "max_position_embeddings": positions,
              "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0,
              "hidden_act": "gelu"}
    (path / "config.json").write_text(json.dumps(config, indent=2))
    mx.random.seed(seed)

    def w(*shape):
        return mx.random.normal(shape) * 0.05

    weights = {"embeddings.word_embeddings.weight": w(vocab, hidden),
               "embeddings.position_embeddings.weight": w(positions, hidden),
               "embeddings.token_type_embeddings.weight": w(2, hidden),
               "embeddings.LayerNorm.weight": mx.ones(hidden) + w(hidden),
               "embeddings.LayerNorm.bias": w(hidden),
               "pooler.dense.weight": w(hidden, hidden), "pooler.dense.bias": w(hidden)}
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for name, (o, n) in {"attention.self.query": (hidden, hidden),
                             "attention.self.key": (hidden, hidden),
                             "attention.self.value": (hidden, hidden),
                             "attention.output.dense": (hidden, hidden),
                             "intermediate.dense": (hidden * 4, hidden),
                             "output.dense": (hidden, hidden * 4)}.items():
            weights[p + name + ".weight"] = w(o, n)
            weights[p + name + ".bias"] = w(o)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            weights[p + norm + ".weight"] = mx.ones(hidden) + w(hidden)
            weights[p + norm + ".bias"] = w(hidden)
    mx.save_safetensors(str(path / "model.safetensors"), weights)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling",
                "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
    (path / "modules.json").write_text(json.dumps(modules))
    if max_seq_length is not None:
        (path / "sentence_bert_config.json").write_text(json.dumps(
            {"max_seq_length": max_seq_length, "do_lower_case": do_lower_case}))
    (path / "1_Pooling").mkdir(exist_ok=True)
    (path / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": hidden, "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean"}))
    return path


def reference_bert(path: Path):
    """mlx-embeddings 0.1.0's BERT on the same files: (model, its tokenizer)."""
    import importlib.util

    if "mlx_embeddings" not in sys.modules:
        spec = importlib.util.find_spec("mlx_embeddings")
        package = types.ModuleType("mlx_embeddings")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["mlx_embeddings"] = package
    from mlx_embeddings.models import bert
    from transformers import AutoTokenizer

    config = json.loads((path / "config.json").read_text())
    model = bert.Model(bert.ModelArgs.from_dict(config))
    model.load_weights(str(path / "model.safetensors"), strict=True)
    model.eval()  # as its loader does: no dropout
    mx.eval(model.parameters())
    return model, AutoTokenizer.from_pretrained(str(path))
