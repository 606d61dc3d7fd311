"""Model files written the way published ones are, for the GGUF tests.

- A SentencePiece BPE tokenizer trained with the `sentencepiece` package, with
  the options of Llama 2's and Gemma's tokenizer.model (identity
  normalization, extra whitespace kept, digits split, byte fallback; a dummy
  prefix for llama, none for gemma), in a Hugging Face folder beside a tiny
  random model of the family (config.json, model.safetensors,
  tokenizer_config.json): what mlx-lm loads as the reference.
- That folder converted to a GGUF as llama.cpp's convert_hf_to_gguf.py does:
  gguf's GGUFWriter, the vocabulary made as its `_create_vocab_sentencepiece`
  makes it (tokens, float scores, token types; the file holds them as typed
  FLOAT32 / INT32 arrays, which the GGUF readers return as arrays), gguf's own
  SpecialVocab for the special ids, add_bos/add_eos and the chat template,
  Q/K permuted for llama, Gemma's norms stored as 1 + w.
- A byte-level BPE ('gpt2') folder converted the same way
  (`_set_vocab_gpt2`: tokens, token types, merges from tokenizer.json).
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import mlx.core as mx
import numpy as np

# mlx-lm (Hugging Face) layer names -> llama.cpp's (llama-arch.cpp).
NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
}
# llama.cpp's names where an architecture differs.
ARCH_NAMES = {
    "phi3": {"self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up"},
    "gemma3": {"post_attention_layernorm": "post_attention_norm",
               "pre_feedforward_layernorm": "ffn_norm",
               "post_feedforward_layernorm": "post_ffw_norm"},
}

# Text the tokenizers are trained on: ASCII and a few accents, so that CJK and
# emoji are outside the vocabulary (byte fallback).
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, how are you today? I am fine, thank you.",
    "Tandem batches chats on the CPU and the GPU.\nPrefill and decode.",
    "    indented code: def main():\n        return 42",
    "système, café, naïve, numbers 0123456789 and more words",
    "The capital of France is Paris. The capital of Italy is Rome.",
] * 20

# gguf.TokenType values, as convert_hf_to_gguf.py's SentencePieceTokenTypes.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<start_of_turn>"
    "{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{{ message['content'] }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
LLAMA2_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% else %}{{ ' ' + message['content'] + ' ' + eos_token }}{% endif %}{% endfor %}")

# Per family: the tokenizer's special pieces and ids, as in the real models.
SPM_STYLES = {
    "llama": {"arch": "llama", "class": "LlamaTokenizer", "dummy_prefix": True,
              "unk": (0, "<unk>"), "bos": (1, "<s>"), "eos": (2, "</s>"), "pad": None,
              "user_defined": [], "template": LLAMA2_TEMPLATE},
    "gemma3_text": {"arch": "gemma3", "class": "GemmaTokenizer", "dummy_prefix": False,
                    "pad": (0, "<pad>"), "eos": (1, "<eos>"), "bos": (2, "<bos>"),
                    "unk": (3, "<unk>"), "user_defined": ["<start_of_turn>", "<end_of_turn>"],
                    "template": GEMMA_TEMPLATE},
}


def train_sentencepiece(folder: Path, family: str, vocab_size: int = 420) -> Path:
    """folder/tokenizer.model: a SentencePiece BPE model as `family`'s."""
    import sentencepiece as spm

    style = SPM_STYLES[family]
    ids = {f"{kind}_id": style[kind][0] if style[kind] else -1
           for kind in ("unk", "bos", "eos", "pad")}
    pieces = {f"{kind}_piece": style[kind][1] for kind in ("unk", "bos", "eos", "pad")
              if style[kind]}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tokenizer.model"
    with open(path, "wb") as out:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(CORPUS), model_writer=out, model_type="bpe",
            vocab_size=vocab_size, byte_fallback=True, character_coverage=1.0,
            normalization_rule_name="identity", remove_extra_whitespaces=False,
            add_dummy_prefix=style["dummy_prefix"], split_digits=True,
            allow_whitespace_only_pieces=True, user_defined_symbols=style["user_defined"],
            minloglevel=2, **ids, **pieces)
    return path


def build_spm_folder(family: str, folder: Path, seed: int = 0) -> Path:
    """A tiny random `family` model whose tokenizer is a trained tokenizer.model,
    in Hugging Face layout; its tokenizer_config asks for a BOS, as the real
    ones do."""
    import sentencepiece as spm

    from tests.families import write_weights

    style = SPM_STYLES[family]
    model = spm.SentencePieceProcessor(model_file=str(train_sentencepiece(folder, family)))
    special = {kind: style[kind][1] for kind in ("bos", "eos", "unk", "pad") if style[kind]}
    config = {
        "tokenizer_class": style["class"], "add_bos_token": True, "add_eos_token": False,
        **{f"{kind}_token": piece for kind, piece in special.items()},
        "chat_template": style["template"],
        "added_tokens_decoder": {
            str(model.piece_to_id(p)): {"content": p, "special": True, "normalized": False,
                                        "lstrip": False, "rstrip": False, "single_word": False}
            for p in style["user_defined"]},
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    overrides = {"bos_token_id": style["bos"][0]}
    if family == "gemma3_text":
        # llama.cpp keeps Gemma 3's sliding-window pattern fixed at 6 (the
        # converter writes none): 6 layers, the last one global.
        overrides |= {"num_hidden_layers": 6, "sliding_window_pattern": 6}
    write_weights(family, folder, model.vocab_size(), style["eos"][0],
                  style["pad"][0] if style["pad"] else 0, seed, overrides)
    return folder


def sentencepiece_vocab(folder: Path) -> tuple[list[bytes], list[float], list[int]]:
    """convert_hf_to_gguf.py's `_create_vocab_sentencepiece`: every piece with its
    score and type, then the tokenizer_config's added tokens (control ones
    marked so, score -1000)."""
    import sentencepiece as spm

    model = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
    tokens, scores, types = [], [], []
    for i in range(model.vocab_size()):
        kind = NORMAL
        if model.IsUnknown(i):
            kind = UNKNOWN
        elif model.IsControl(i):
            kind = CONTROL
        elif model.IsUnused(i):
            kind = UNUSED
        elif model.IsByte(i):
            kind = BYTE
        tokens.append(model.IdToPiece(i).encode("utf-8"))
        scores.append(model.GetScore(i))
        types.append(kind)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    for i, data in config.get("added_tokens_decoder", {}).items():
        i = int(i)
        types[i] = CONTROL if data.get("special") else USER_DEFINED
        scores[i] = -1000.0
        tokens[i] = data["content"].encode("utf-8")
    return tokens, scores, types


def byte_level_vocab(folder: Path) -> tuple[list[str], list[int]]:
    """convert_hf_to_gguf.py's `get_vocab_base` for a tokenizer.json BPE."""
    tok = json.loads((folder / "tokenizer.json").read_text())
    vocab = dict(tok["model"]["vocab"])
    added = {t["content"]: t for t in tok["added_tokens"]}
    vocab |= {t: a["id"] for t, a in added.items()}
    tokens = [f"[PAD{i}]" for i in range(max(vocab.values()) + 1)]
    types = [UNUSED] * len(tokens)
    for text, i in vocab.items():
        tokens[i] = text
        types[i] = (CONTROL if added[text]["special"] else USER_DEFINED) if text in added \
            else NORMAL
    return tokens, types


def permute(w: mx.array, n_head: int) -> mx.array:
    """convert_hf_to_gguf.py's LlamaModel.permute of Q/K rows (interleaved RoPE)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, w.shape[1]).swapaxes(1, 2).reshape(
        w.shape)


def gguf_tensors(folder: Path, arch: str) -> dict[str, mx.array]:
    """The folder's weights under llama.cpp's names, as its converter stores them."""
    config = json.loads((folder / "config.json").read_text())
    names = NAMES | ARCH_NAMES.get(arch, {})
    out = {}
    for name, w in mx.load(str(folder / "model.safetensors")).items():
        if arch == "gemma3" and name.endswith("norm.weight"):
            w = w + 1  # llama.cpp's Gemma converter stores 1 + w
        if name == "model.embed_tokens.weight":
            out["token_embd.weight"] = w
        elif name == "model.norm.weight":
            out["output_norm.weight"] = w
        elif name == "lm_head.weight":
            out["output.weight"] = w
        else:
            _, _, layer, *rest = name.split(".")
            module = ".".join(rest[:-1])
            if arch == "llama" and module == "self_attn.q_proj":
                w = permute(w, config["num_attention_heads"])
            elif arch == "llama" and module == "self_attn.k_proj":
                w = permute(w, config["num_key_value_heads"])
            out[f"blk.{layer}.{names[module]}.{rest[-1]}"] = w
    return out


def _write_hparams(w: gguf.GGUFWriter, config: dict, arch: str) -> None:
    """TextModel.set_gguf_parameters (and Gemma3Model's) for the folder's config."""
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_block_count(config["num_hidden_layers"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(config["num_attention_heads"])
    w.add_head_count_kv(config["num_key_value_heads"])
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    w.add_rope_freq_base(config["rope_theta"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if arch == "llama":
        w.add_vocab_size(config["vocab_size"])
        w.add_rope_dimension_count(config["hidden_size"] // config["num_attention_heads"])
    if arch == "gemma3":
        w.add_key_length(config["head_dim"])
        w.add_value_length(config["head_dim"])
        w.add_sliding_window(config["sliding_window"])


def write_gguf(folder: Path, path: Path, arch: str, vocab: str = "spm", pre: str = "gpt-2",
               metadata: dict | None = None) -> Path:
    """The folder converted as convert_hf_to_gguf.py does, float32; `metadata`
    sets keys (None leaves a key the converter wrote out)."""
    config = json.loads((folder / "config.json").read_text())
    w = gguf.GGUFWriter(str(path), arch)
    _write_hparams(w, config, arch)
    if vocab == "spm":  # _set_vocab_sentencepiece
        tokens, scores, types = sentencepiece_vocab(folder)
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        special = gguf.SpecialVocab(folder, n_vocab=len(tokens))
        if arch == "gemma3":
            w.add_add_space_prefix(False)
    else:  # _set_vocab_gpt2
        tokens, types = byte_level_vocab(folder)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_types(types)
        special = gguf.SpecialVocab(folder, load_merges=True)
    special.add_to_gguf(w, quiet=True)
    metadata = metadata or {}
    w.kv_data = [{k: v for k, v in kv.items() if k not in metadata} for kv in w.kv_data]
    for key, value in metadata.items():
        if value is not None:
            w.add_key_value(key, value, _value_type(value))
    for name, tensor in gguf_tensors(folder, arch).items():
        w.add_tensor(name, np.array(tensor, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _value_type(value) -> gguf.GGUFValueType:
    if isinstance(value, list):
        return gguf.GGUFValueType.ARRAY
    if isinstance(value, bool):
        return gguf.GGUFValueType.BOOL
    if isinstance(value, int):
        return gguf.GGUFValueType.UINT32
    if isinstance(value, float):
        return gguf.GGUFValueType.FLOAT32
    return gguf.GGUFValueType.STRING


def llama_cpp_spm(tokens: list[str], scores: list[float], space_prefix: bool,
                  text: str) -> list[int]:
    """llama.cpp's SentencePiece BPE (llm_tokenizer_spm_session), written out
    plainly: the adjacent pair whose merged piece scores highest merges first
    (the leftmost on a tie); what is left outside the vocabulary becomes
    <0xXX> byte pieces. An empty text has no pieces, not even the prefix."""
    if not text:
        return []
    ids = {t: i for i, t in enumerate(tokens)}
    text = ("▁" if space_prefix else "") + text.replace(" ", "▁")
    symbols = list(text)
    while True:
        best = None
        for i in range(len(symbols) - 1):
            merged = symbols[i] + symbols[i + 1]
            if merged in ids and (best is None or scores[ids[merged]] > best[0]):
                best = (scores[ids[merged]], i)
        if best is None:
            break
        i = best[1]
        symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
    out = []
    for s in symbols:
        out += [ids[s]] if s in ids else [ids[f"<0x{b:02X}>"] for b in s.encode()]
    return out
