"""A tiny llama whose weights make it say one given text, for tests of what a
model's output carries (a reasoning model's thinking, later tool calls).

Real MLX forward passes, crafted weights: every layer's output projections
are zero, so the last hidden state is the last token's embedding; the
script's tokens have orthogonal embeddings and the output head maps each to
the next, with a margin that no sampling setting here overturns. From the
last prompt token (the chat template's generation prompt ends with it) the
model writes the script, then its end-of-turn token.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

from tests.tiny_model import CORPUS, SPECIALS

THINK = ("<think>", "</think>")

# Qwen3's template, reduced: history is the messages' content (a template
# that keeps thinking out of the next turn gets it without), and the model
# opens its own <think>.
QWEN3_LIKE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# DeepSeek-R1's distills: the template opens <think> for the model.
R1_LIKE = QWEN3_LIKE.replace("<|im_start|>assistant\n{% endif %}",
                             "<|im_start|>assistant\n<think>\n{% endif %}")


def _tokenizer(path: Path, template: str, extra_tokens: tuple = (),
               corpus: Sequence[str] = (), vocab: int = 400):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([*CORPUS, *corpus], trainer)
    # As in Qwen3: the thinking markers are added tokens, not special ones
    # (so they are in the decoded text, where the engine splits on them).
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t in THINK + tuple(t for t in extra_tokens if t not in THINK)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   bos_token="<|im_start|>", pad_token="<|endoftext|>",
                                   chat_template=template)
    fast.save_pretrained(path)
    return fast


def build_scripted_model(path: Path, script: str, template: str = QWEN3_LIKE,
                         hidden: int = 64, max_positions: int = 512,
                         extra_tokens: tuple = (), corpus: Sequence[str] = (),
                         vocab: int = 400) -> Path:
    """A model in `path` that answers any chat with `script` (then ends);
    `extra_tokens`: added tokens (a tool format's markers), `max_positions`
    its context; `corpus`, `vocab`: its tokenizer's (tests/tiny_model.py
    build_tokenizer)."""
    from mlx_lm.models import llama

    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer(path, template, extra_tokens, corpus, vocab)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    start = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}],
                                          add_generation_prompt=True,
                                          return_dict=True)["input_ids"][-1]
    chain = [start] + tokenizer.encode(script, add_special_tokens=False) + [eos]
    if len(set(chain[:-1])) != len(chain) - 1 or len(chain) > hidden:
        raise ValueError(f"the script must be at most {hidden - 2} distinct tokens: "
                         f"{tokenizer.convert_ids_to_tokens(chain)}")
    config = {
        "model_type": "llama", "hidden_size": hidden, "num_hidden_layers": 1,
        "intermediate_size": hidden * 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5, "vocab_size": len(tokenizer), "max_position_embeddings": max_positions,
        "rope_theta": 10000.0, "tie_word_embeddings": False, "eos_token_id": eos,
        "torch_dtype": "float32",
    }
    mx.random.seed(0)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    vocab = len(tokenizer)
    embed = mx.random.normal((vocab, hidden)) * 0.01
    head = mx.zeros((vocab, hidden))
    basis = mx.eye(hidden)
    for i, (token, following) in enumerate(zip(chain, chain[1:])):
        embed[token] = basis[i] * 4.0
        head[following] = basis[i] * 10.0
    model.model.embed_tokens.weight = embed
    model.lm_head.weight = head
    weights = dict(tree_flatten(model.parameters()))
    for name in weights:
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            weights[name] = mx.zeros_like(weights[name])  # layers add nothing
    mx.save_safetensors(str(path / "model.safetensors"), weights)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    (path / "generation_config.json").write_text(
        json.dumps({"do_sample": False, "repetition_penalty": 1.0}))
    return path
