"""GGUF types beyond what mx.load reads into quantized arrays (the K-quants,
Q5_0, Q5_1, BF16) load tensor by tensor into MLX quantized (or dense) arrays,
close to gguf's own dequantization of every block, and never through a dense
copy of the whole model.

The files are tiny llamas written with gguf's GGUFWriter. gguf's numpy
`quantize` has no K-quants, so K-quant blocks are random bytes with their f16
scale fields set to small positive values; `gguf.quants.dequantize` of the
same bytes is the reference.
"""

from __future__ import annotations

import json

import gguf
import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize, quantize

from engine import EngineError, load_model
from engine.models.gguf.check import SUPPORTED_TENSOR_TYPES, validate_gguf
from engine.models.gguf.tensors import MX_LOAD_TYPES, read_tensors
from tests.helpers import prompt_of, reference_greedy
from tests.tiny_model import CHAT_TEMPLATE

# What each type must become (independent of engine/models/gguf/tensors.py's table).
BITS = {"Q4_0": 4, "Q4_1": 4, "Q4_K": 4, "Q5_0": 5, "Q5_1": 5, "Q5_K": 5, "Q6_K": 8, "Q8_0": 8}
DTYPES = {"F32": mx.float32, "F16": mx.float16, "BF16": mx.bfloat16}
LAYER = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
         "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
         "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
F16_EPS = 2.0**-11  # float16's relative rounding


def random_blocks(qtype: str, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Raw K-quant bytes (rows, bytes per row): random, but for finite small scales."""
    block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType[qtype]]
    raw = rng.integers(0, 256, size=(rows, cols // block_size * type_size), dtype=np.uint8)
    blocks = raw.reshape(-1, type_size)
    if qtype in ("Q4_K", "Q5_K"):  # d and dmin: the first two f16 of each block
        blocks[:, 0:4] = rng.uniform(2e-4, 2e-3, (len(blocks), 2)).astype(np.float16).view(np.uint8)
    elif qtype == "Q6_K":  # d: the last f16 of each block
        blocks[:, -2:] = rng.uniform(2e-4, 2e-3, (len(blocks), 1)).astype(np.float16).view(np.uint8)
    else:
        raise ValueError(qtype)
    return raw


def encode(qtype: str, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """A (rows, cols) weight in `qtype`, as the bytes (or floats) the writer takes."""
    if qtype.endswith("_K"):
        return random_blocks(qtype, rows, cols, rng)
    x = rng.normal(0, 0.05, (rows, cols)).astype(np.float32)
    if qtype == "F32":
        return x
    if qtype == "F16":
        return x.astype(np.float16)
    return quantize(x, GGMLQuantizationType[qtype])  # BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0


def reference(qtype: str, data: np.ndarray) -> np.ndarray:
    if qtype in ("F32", "F16"):
        return data.astype(np.float32)
    return dequantize(data, GGMLQuantizationType[qtype])


def tokenizer_metadata(tiny_model_dir) -> tuple[dict, int]:
    tok = json.loads((tiny_model_dir / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    added = {t["content"]: t["id"] for t in tok["added_tokens"]}
    tokens = [None] * (max(list(vocab.values()) + list(added.values())) + 1)
    for t, i in {**vocab, **added}.items():
        tokens[i] = t
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    return {"tokens": tokens, "merges": merges,
            "token_type": [3 if t in added else 1 for t in tokens],
            "eos": added["<|im_end|>"], "bos": added["<|im_start|>"]}, len(tokens)


def write_llama(path, tiny_model_dir, types: dict[str, str], seed: int = 0, hidden=256,
                intermediate=512, layers=2, heads=4,
                kv_heads=2) -> dict[str, tuple[str, np.ndarray]]:
    """A llama GGUF whose 2-D tensors have the types `types` gives by GGUF name
    ("*" for the rest); returns {name: (type, data written)} for the 2-D ones."""
    rng = np.random.default_rng(seed)
    tok, vocab = tokenizer_metadata(tiny_model_dir)
    head_dim = hidden // heads
    shapes = {"token_embd.weight": (vocab, hidden)}
    for i in range(layers):
        shapes |= {f"blk.{i}.attn_q.weight": (hidden, hidden),
                   f"blk.{i}.attn_k.weight": (kv_heads * head_dim, hidden),
                   f"blk.{i}.attn_v.weight": (kv_heads * head_dim, hidden),
                   f"blk.{i}.attn_output.weight": (hidden, hidden),
                   f"blk.{i}.ffn_gate.weight": (intermediate, hidden),
                   f"blk.{i}.ffn_up.weight": (intermediate, hidden),
                   f"blk.{i}.ffn_down.weight": (hidden, intermediate)}
    if "output.weight" in types:
        shapes["output.weight"] = (vocab, hidden)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(layers)
    w.add_context_length(256)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(intermediate)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tok["tokens"])
    w.add_token_merges(tok["merges"])
    w.add_token_types(tok["token_type"])
    w.add_eos_token_id(tok["eos"])
    w.add_bos_token_id(tok["bos"])
    w.add_chat_template(CHAT_TEMPLATE)
    written = {}
    for name, (rows, cols) in shapes.items():
        qtype = types.get(name, types["*"])
        data = encode(qtype, rows, cols, rng)
        raw_dtype = GGMLQuantizationType[qtype] if data.dtype == np.uint8 else None
        w.add_tensor(name, data, raw_dtype=raw_dtype)
        written[name] = (qtype, data)
    for i in range(layers):
        for norm in ("attn_norm", "ffn_norm"):
            w.add_tensor(f"blk.{i}.{norm}.weight", np.ones(hidden, np.float32))
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return written


def module_of(model: nn.Module, gguf_name: str) -> nn.Module:
    parts = gguf_name.split(".")
    if parts[0] == "blk":
        path = f"model.layers.{parts[1]}.{LAYER[parts[2]]}"
    else:
        path = {"token_embd": "model.embed_tokens", "output": "lm_head"}[parts[0]]
    module = model
    for p in path.split("."):
        module = module[int(p)] if p.isdigit() else getattr(module, p)
    return module


def group_tolerance(qtype: str, raw: np.ndarray) -> np.ndarray:
    """Per 32-group (rows, cols/32): the largest error the conversion may make."""
    blocks = raw.reshape(-1, GGML_QUANT_SIZES[GGMLQuantizationType[qtype]][1])
    f16 = lambda at: blocks[:, at:at + 2].view(np.float16).astype(np.float32)  # noqa: E731
    if qtype in ("Q4_K", "Q5_K"):
        # The stored integers are kept; only scale d*sc and bias dmin*m round to f16.
        sc, m = gguf.quants.Q4_K.get_scale_min(blocks[:, 4:16])
        step = f16(0) * sc.astype(np.float32)
        bias = f16(2) * m.astype(np.float32)
        tol = 1.01 * F16_EPS * (step * (2**BITS[qtype] - 1) + bias)
        assert (tol <= 0.05 * step + 1e-7).mean() > 0.9  # far inside half a step
        return tol.reshape(raw.shape[0], -1)
    assert qtype == "Q6_K"
    # Requantized to 8 bits per 32 values: half of range/255, plus f16 rounding.
    values = dequantize(raw, GGMLQuantizationType.Q6_K).reshape(raw.shape[0], -1, 32)
    lo, hi = values.min(-1), values.max(-1)
    step8 = (hi - lo) / 255
    tol = 0.5 * step8 * (1 + 4 * F16_EPS) + F16_EPS * (np.abs(lo) + np.abs(hi))
    # ... which is well under half of the coarser Q6_K step (d * scale, per 16).
    q6_step = np.abs(f16(208) * blocks[:, 192:208].view(np.int8).astype(np.float32))
    coarse = q6_step.reshape(raw.shape[0], -1, 2).max(-1)
    assert np.all(tol <= 0.16 * coarse + 1e-7)
    return tol


def dequantized(module: nn.Module) -> np.ndarray:
    """A quantized layer's weights, dequantized in float32 arithmetic."""
    return np.array(mx.dequantize(module.weight, module.scales.astype(mx.float32),
                                  module.biases.astype(mx.float32),
                                  group_size=module.group_size, bits=module.bits))


def check_weights(model: nn.Module, written: dict[str, tuple[str, np.ndarray]]) -> None:
    for name, (qtype, data) in written.items():
        module = module_of(model, name)
        ref = reference(qtype, data)
        if qtype in DTYPES:
            assert "scales" not in module, name
            assert module.weight.dtype == DTYPES[qtype], (name, module.weight.dtype)
            assert np.array_equal(np.array(module.weight.astype(mx.float32)), ref), name
            continue
        assert isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding)), (name, module)
        assert (module.bits, module.group_size) == (BITS[qtype], 32), (name, module.bits)
        got = dequantized(module)
        assert got.shape == ref.shape, name
        err = np.abs(got - ref).reshape(ref.shape[0], -1, 32).max(-1)
        if qtype in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"):
            assert err.max() <= 2.0**-20 * np.abs(ref).max(), (name, err.max())
        else:
            tol = group_tolerance(qtype, data)
            assert np.all(err <= tol + 1e-7), (name, (err - tol).max())


def load_and_check(path, written):
    loaded = load_model(str(path))
    check_weights(loaded.model, written)
    tokens = reference_greedy(loaded, prompt_of(loaded, "hello world"), 4)
    assert tokens and all(0 <= t < loaded.model.args.vocab_size for t in tokens)
    return loaded


@pytest.mark.parametrize("qtype", ["Q4_K", "Q5_K", "Q6_K", "Q5_0", "Q5_1", "Q4_0", "Q4_1",
                                   "Q8_0", "BF16", "F16"])
def test_each_type_loads_close_to_gguf_dequantization(tmp_path, tiny_model_dir, qtype):
    path = tmp_path / f"{qtype}.gguf"
    written = write_llama(path, tiny_model_dir, {"*": qtype})
    load_and_check(path, written)
    if qtype in MX_LOAD_TYPES:
        # Read by mx.load, as before; the tensor-by-tensor reader gives the same arrays.
        native = mx.load(str(path))
        streamed = read_tensors(path, validate_gguf(path))
        assert set(native) == set(streamed)
        for k, v in native.items():
            assert v.dtype == streamed[k].dtype and v.shape == streamed[k].shape, k
            assert mx.array_equal(v, streamed[k]).item(), k


def test_q4_k_m_mix(tmp_path, tiny_model_dir):
    """As llama.cpp's Q4_K_M: Q6_K for attn_v, ffn_down and output, Q4_K elsewhere;
    a layer's bits follow its own type."""
    path = tmp_path / "q4_k_m.gguf"
    types = {"*": "Q4_K", "output.weight": "Q6_K"}
    for i in range(2):
        types |= {f"blk.{i}.attn_v.weight": "Q6_K", f"blk.{i}.ffn_down.weight": "Q6_K"}
    written = write_llama(path, tiny_model_dir, types)
    loaded = load_and_check(path, written)
    layer = loaded.model.model.layers[0]
    assert layer.self_attn.q_proj.bits == 4 and layer.self_attn.v_proj.bits == 8
    assert layer.mlp.up_proj.bits == 4 and layer.mlp.down_proj.bits == 8
    assert loaded.model.lm_head.bits == 8 and loaded.model.model.embed_tokens.bits == 4
    # A float32 lane dequantizes the mixed bits layer by layer.
    dense = load_model(str(path), weight_format="float32").model
    for name, (qtype, data) in written.items():
        module = module_of(dense, name)
        assert isinstance(module, (nn.Linear, nn.Embedding)) and "scales" not in module
        assert module.weight.dtype == mx.float32
        assert np.array_equal(np.array(module.weight),
                              dequantized(module_of(loaded.model, name))), name


def test_reader_matches_mx_load_on_the_default_model():
    """The tensor-by-tensor reader and the metadata walk give exactly what mx.load
    gives on the real Q4_1/Q8_0/F32 default model."""
    from engine.models.gguf.meta import read_metadata
    from engine.models.loader import default_model_path

    path = default_model_path()
    native, native_meta = mx.load(str(path), return_metadata=True)
    streamed = read_tensors(path, validate_gguf(path))
    assert set(native) == set(streamed)
    for k, v in native.items():
        assert v.dtype == streamed[k].dtype and v.shape == streamed[k].shape, k
        assert mx.array_equal(v, streamed[k]).item(), k
    meta = read_metadata(path)
    assert set(meta) == set(native_meta)
    for k, v in native_meta.items():
        if isinstance(v, mx.array):
            assert np.array_equal(np.asarray(meta[k]), np.array(v)), k
        else:
            assert meta[k] == v, k


def test_every_type_in_one_file(tmp_path, tiny_model_dir):
    """All supported types side by side, so the types mx.load would read (Q4_0,
    Q4_1, Q8_0, F16, F32) go through the tensor-by-tensor reader too."""
    path = tmp_path / "all.gguf"
    kinds = ["Q4_K", "Q5_K", "Q6_K", "Q5_0", "Q5_1", "Q4_0", "Q4_1", "Q8_0", "BF16", "F16",
             "F32"]
    names = [f"blk.{i}.{t}.weight" for i in range(2) for t in LAYER]
    types = {"*": "Q8_0", "output.weight": "BF16"} | {
        name: kinds[i % len(kinds)] for i, name in enumerate(names)}
    written = write_llama(path, tiny_model_dir, types)
    assert {t for t, _ in written.values()} == set(SUPPORTED_TENSOR_TYPES)
    load_and_check(path, written)


@pytest.mark.parametrize("qtype", ["Q2_K", "Q3_K", "IQ4_NL"])
def test_other_types_are_a_clear_error(tmp_path, qtype):
    block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType[qtype]]
    path = tmp_path / f"{qtype}.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("blk.0.ffn_down.weight", np.zeros((4, 256 // block_size * type_size), np.uint8),
                 raw_dtype=GGMLQuantizationType[qtype])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(EngineError, match=f"unsupported tensor type {qtype} in tensor "
                                          "'blk.0.ffn_down.weight' \\(Tandem reads .*Q4_K"):
        load_model(str(path))


def _weight_bytes(model: nn.Module) -> int:
    from mlx.utils import tree_flatten

    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


def test_k_quant_load_needs_no_float16_copy(tmp_path, tiny_model_dir):
    """Loading a ~30 MB Q4_K file: the model stays 4-bit (5 bits a weight with
    its float16 scales and biases, against Q4_K's 4.5) and the peak MLX memory
    is the loaded model plus at most one tensor's float32 values, where mx.load's
    float16 copy alone is about 3.5 times the file."""
    path = tmp_path / "big_q4_k.gguf"
    shape = dict(hidden=1024, intermediate=2816, layers=4, heads=8, kv_heads=8)
    write_llama(path, tiny_model_dir, {"*": "Q4_K"}, **shape)
    file_bytes = path.stat().st_size
    largest = max(int(np.prod(info.dims)) for info in validate_gguf(path))

    mx.clear_cache()
    base = mx.get_active_memory()
    mx.reset_peak_memory()
    loaded = load_model(str(path))
    peak = mx.get_peak_memory() - base
    loaded_bytes = _weight_bytes(loaded.model)
    assert loaded_bytes <= 1.15 * file_bytes, (loaded_bytes, file_bytes)
    bound = loaded_bytes + 4 * largest + (2 << 20)
    assert peak <= bound, (peak, loaded_bytes, largest)

    # The bound means something: mx.load of the same file (K-quants dequantized
    # to float16) needs far more.
    del loaded
    mx.clear_cache()
    base = mx.get_active_memory()
    mx.reset_peak_memory()
    dense = mx.load(str(path))
    mx.eval(dense)
    old_peak = mx.get_peak_memory() - base
    assert old_peak > 2 * bound, (old_peak, bound)
