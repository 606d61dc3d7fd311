"""Build tiny random models saved in Hugging Face layout, for fast real tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, how are you today? I am fine, thank you.",
    "Tandem batches chats on the CPU and the GPU. Prefill and decode.",
    "système, café, naïve, 東京, emoji 🙂 and numbers 0123456789",
] * 20


def build_tokenizer(path: Path, corpus: Sequence[str] = (), vocab: int = 400):
    """A byte-level BPE trained on CORPUS; `corpus`, `vocab`: more text to
    train on and a larger vocabulary, so that a long prompt of that text (a
    coding agent's request) costs fewer tokens to prefill."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([*CORPUS, *corpus], trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", bos_token="<|im_start|>",
        pad_token="<|endoftext|>", chat_template=CHAT_TEMPLATE)
    fast.save_pretrained(path)
    return fast


def build_tiny_llama(path: Path, seed: int = 0, num_layers: int = 2, hidden: int = 64,
                     max_positions: int = 512, corpus: Sequence[str] = (),
                     vocab: int = 400) -> Path:
    """A random float32 llama in `path` (config.json, model.safetensors, tokenizer;
    `corpus`, `vocab`: build_tokenizer's)."""
    from mlx_lm.models import llama

    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(path, corpus, vocab)
    config = {
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": num_layers,
        "intermediate_size": hidden * 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "vocab_size": len(tokenizer),
        "max_position_embeddings": max_positions,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"),
        "torch_dtype": "float32",
    }
    mx.random.seed(seed)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    # Default initialisation makes a random model repeat one token forever,
    # which would let batching bugs pass unseen. Larger embeddings and
    # projections give varied, context-dependent greedy output with logits
    # well separated, so float rounding does not decide greedy choices.
    model.model.embed_tokens.weight = mx.random.normal(
        model.model.embed_tokens.weight.shape) * 0.5
    weights = {k: (v * 4 if k.endswith("proj.weight") else v)
               for k, v in tree_flatten(model.parameters())}
    mx.save_safetensors(str(path / "model.safetensors"), weights)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    # The model's own sampling defaults (engine/models/gendefaults.py): greedy,
    # no penalty, so that app tests (new chats take these) are deterministic.
    (path / "generation_config.json").write_text(
        json.dumps({"do_sample": False, "repetition_penalty": 1.0}))
    return path
