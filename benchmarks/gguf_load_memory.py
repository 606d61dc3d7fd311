"""Memory while loading a K-quant GGUF: Tandem's tensor-by-tensor reader vs
`mx.load` (which dequantizes K-quants to float16).

Run:
  .venv/bin/python benchmarks/gguf_load_memory.py [--layers 8] [--hidden 2048] [--keep]

Builds a llama GGUF mixed like llama.cpp's Q4_K_M (Q6_K for attn_v, ffn_down
and output, Q4_K elsewhere) from random K-quant blocks with small finite
scales, then loads it in two fresh processes:

- new: `engine.load_model(path)` (validation, metadata, tensor-by-tensor
  conversion to MLX 4-/8-bit arrays, the mlx-lm model, the tokenizer);
- old: `mx.load(path)` alone (every K-quant tensor dequantized to float16; the
  old Tandem path refused the file outright).

Each process reports MLX's peak memory during the load (mx.get_peak_memory
after mx.reset_peak_memory), the bytes of the arrays it ends with, and the
process's peak RSS growth over its RSS just before the load (ru_maxrss). Prints
a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MiB = 2**20

_CHILD = r"""
import json, resource, sys, time
mode, path = sys.argv[1], sys.argv[2]
if mode == "new":
    import engine  # OpenBLAS before mlx, as the app does
import mlx.core as mx
from mlx.utils import tree_flatten

def rss_peak():
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r if sys.platform == "darwin" else r * 1024

def rss_now():
    try:
        with open("/proc/self/statm") as f:
            import os
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return rss_peak()

if mode == "new":
    from engine import load_model
    from engine.models.gguf.check import validate_gguf
    validate_gguf(path)  # warm the imports (gguf, numpy) outside the measurement
before = rss_now()
mx.reset_peak_memory()
base = mx.get_active_memory()
t = time.perf_counter()
if mode == "new":
    model = load_model(path).model
    arrays = [v for _, v in tree_flatten(model.parameters())]
else:
    weights = mx.load(path)
    mx.eval(weights)
    arrays = list(weights.values())
seconds = time.perf_counter() - t
print(json.dumps({"peak": mx.get_peak_memory() - base, "loaded": sum(a.nbytes for a in arrays),
                  "rss_growth": rss_peak() - before, "seconds": seconds}))
"""


def build(path: Path, hidden: int, layers: int, intermediate: int, heads: int, kv_heads: int,
          vocab: int, seed: int = 0, chat_template: str | None = None) -> dict:
    """Write the Q4_K_M-like file; returns what it holds. `chat_template`: one
    for chats (benchmarks/llama_cpp_anchor.py's --shape), none by default."""
    import gguf
    import numpy as np
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    from tokenizers import pre_tokenizers

    rng = np.random.default_rng(seed)

    def blocks(qtype: str, rows: int, cols: int) -> np.ndarray:
        block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType[qtype]]
        raw = rng.integers(0, 256, size=(rows, cols // block_size * type_size), dtype=np.uint8)
        b = raw.reshape(-1, type_size)
        at = slice(0, 4) if qtype == "Q4_K" else slice(type_size - 2, type_size)
        n = 2 if qtype == "Q4_K" else 1
        b[:, at] = rng.uniform(2e-4, 2e-3, (len(b), n)).astype(np.float16).view(np.uint8)
        return raw

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    # One merge (llama.cpp refuses a byte-level vocabulary without any).
    tokens = specials + sorted(pre_tokenizers.ByteLevel.alphabet()) + ["\u0120t"]
    tokens += [f"<unused{i}>" for i in range(vocab - len(tokens))]
    head_dim = hidden // heads
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(layers)
    w.add_context_length(4096)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(intermediate)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_merges(["\u0120 t"])
    w.add_token_types([3] * len(specials) + [1] * (len(tokens) - len(specials)))
    w.add_eos_token_id(2)
    w.add_bos_token_id(1)
    if chat_template:
        w.add_chat_template(chat_template)
    shapes = {"token_embd.weight": ("Q4_K", vocab, hidden)}
    for i in range(layers):
        shapes |= {f"blk.{i}.attn_q.weight": ("Q4_K", hidden, hidden),
                   f"blk.{i}.attn_k.weight": ("Q4_K", kv_heads * head_dim, hidden),
                   f"blk.{i}.attn_v.weight": ("Q6_K", kv_heads * head_dim, hidden),
                   f"blk.{i}.attn_output.weight": ("Q4_K", hidden, hidden),
                   f"blk.{i}.ffn_gate.weight": ("Q4_K", intermediate, hidden),
                   f"blk.{i}.ffn_up.weight": ("Q4_K", intermediate, hidden),
                   f"blk.{i}.ffn_down.weight": ("Q6_K", hidden, intermediate)}
    shapes["output.weight"] = ("Q6_K", vocab, hidden)
    params = {"Q4_K": 0, "Q6_K": 0}
    for name, (qtype, rows, cols) in shapes.items():
        w.add_tensor(name, blocks(qtype, rows, cols), raw_dtype=GGMLQuantizationType[qtype])
        params[qtype] += rows * cols
    for i in range(layers):
        for norm in ("attn_norm", "ffn_norm"):
            w.add_tensor(f"blk.{i}.{norm}.weight", np.ones(hidden, np.float32))
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    largest = max(rows * cols for _, rows, cols in shapes.values())
    return {"params": params, "largest": largest}


def measure(mode: str, path: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", _CHILD, mode, str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"))
    if proc.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--keep", action="store_true", help="keep the built file (prints its path)")
    args = ap.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="tandem-gguf-mem-"))
    path = folder / "q4_k_m_like.gguf"
    t = time.perf_counter()
    info = build(path, args.hidden, args.layers, args.intermediate, args.heads, args.kv_heads,
                 args.vocab)
    build_s = time.perf_counter() - t
    file_bytes = path.stat().st_size
    try:
        new = measure("new", path)
        old = measure("old", path)
    finally:
        if not args.keep:
            path.unlink()
            folder.rmdir()
    params = info["params"]
    total = sum(params.values())
    print(f"Machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; MLX CPU backend.\n")
    print(f"File: llama, hidden {args.hidden}, {args.layers} layers, intermediate "
          f"{args.intermediate}, vocab {args.vocab}; {total / 1e6:.0f}M weights "
          f"({params['Q4_K'] / 1e6:.0f}M Q4_K, {params['Q6_K'] / 1e6:.0f}M Q6_K); "
          f"{file_bytes / MiB:.0f} MiB; built in {build_s:.0f} s. Largest tensor "
          f"{info['largest'] / 1e6:.1f}M weights ({4 * info['largest'] / MiB:.0f} MiB "
          f"as float32).\n")
    print("| load | MLX peak during load | arrays loaded | peak / loaded | peak / file "
          "| peak RSS growth | time |")
    print("|---|---|---|---|---|---|---|")
    for label, r in (("Tandem: `load_model` (tensor by tensor, Q4_K→4-bit, Q6_K→8-bit)", new),
                     ("old: `mx.load` (K-quants → float16)", old)):
        print(f"| {label} | {r['peak'] / MiB:.0f} MiB | {r['loaded'] / MiB:.0f} MiB | "
              f"{r['peak'] / r['loaded']:.2f} | {r['peak'] / file_bytes:.2f} | "
              f"{r['rss_growth'] / MiB:.0f} MiB | {r['seconds']:.1f} s |")
    if args.keep:
        print(f"\nkept {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
