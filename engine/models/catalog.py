"""The models on disk, described without loading them, with the memory plan's
verdict for this machine.

Plain Python (no MLX): a model folder is read from its config.json and its
safetensors headers (shapes and dtypes, never the weights); a GGUF file from
its header and metadata (engine/models/gguf/check.py walks it). The verdict runs the
same `plan_memory` the engine runs at load, with the lanes this machine would
give the model.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path

from .vision_kinds import SERVED as VISION_SERVED
from ..core.memory import LaneRequest, format_bytes, lane_request, plan_memory
from ..core.model_shape import ModelShape, shape_from_config

_DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "U32": 4, "I32": 4, "U8": 1, "I8": 1,
                "F64": 8, "I64": 8, "U16": 2, "I16": 2, "BOOL": 1}


@dataclass(slots=True)
class ModelEntry:
    """One model on disk, as the model library lists it."""
    source: str  # what Engine.load takes: "default", a folder or a .gguf path
    name: str
    family: str = "?"
    parameters: int = 0
    quantization: str = "?"  # "4-bit", "Q4_K_M", "bfloat16", ...
    file_bytes: int = 0
    context_length: int = 0
    shape: ModelShape | None = None
    problem: str | None = None  # why it cannot be described (then it cannot load either)
    origin: str = "added"  # "bundled", "hub-cache", "added"
    reads_images: bool = False  # a vision model Tandem serves (engine/models/vision.py)
    verdict: str = ""
    verdict_detail: str = ""
    extra: dict = field(default_factory=dict)


def describe_folder(path: Path, origin: str = "added", name: str | None = None) -> ModelEntry:
    """A Hugging Face / MLX model folder: config.json and safetensors headers."""
    entry = ModelEntry(str(path), name or path.name, origin=origin)
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        entry.reads_images = isinstance(config.get("vision_config"), dict) and \
            config.get("model_type") in VISION_SERVED
        config = config.get("text_config", {}) | config if "text_config" in config else config
        entry.family = str(config.get("model_type", "?"))
        quant = config.get("quantization") or config.get("quantization_config") or {}
        bits = quant.get("bits")
        entry.quantization = f"{bits}-bit" if bits else str(config.get("torch_dtype", "?"))
        entry.context_length = int(config.get("max_position_embeddings", 0) or 0)
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise ValueError("no .safetensors weights in the folder")
        entry.file_bytes = sum(f.stat().st_size for f in files)
        entry.parameters = sum(_safetensors_params(f, bits) for f in files)
        # The same shape the engine plans with; parameters counted from the
        # safetensors headers (exact for any family), bytes from the files.
        entry.shape = replace(shape_from_config(config, weight_bytes=entry.file_bytes),
                              dense_params=entry.parameters)
    except Exception as e:  # unreadable or not a model folder: listed, with why
        entry.problem = f"{type(e).__name__}: {e}" if not isinstance(e, ValueError) else str(e)
    return entry


def _safetensors_params(path: Path, bits: int | None) -> int:
    """Parameters in one safetensors file, from its JSON header only."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        if size > 100 << 20:
            raise ValueError(f"{path.name}: implausible safetensors header ({size} bytes)")
        header = json.loads(f.read(size))
    names = set(header)
    total = 0
    for name, info in header.items():
        if name == "__metadata__" or name.endswith((".scales", ".biases")):
            continue
        count = 1
        for d in info["shape"]:
            count *= int(d)
        stem = name.rsplit(".", 1)[0]
        if bits and info.get("dtype") == "U32" and f"{stem}.scales" in names:
            count = count * 32 // bits  # packed quantized weights
        total += count
    return total


def describe_gguf(path: Path, origin: str = "added", name: str | None = None) -> ModelEntry:
    """A GGUF file: its metadata and tensor types (no tensor data is read)."""
    from .gguf.check import validate_gguf
    from .gguf.meta import read_metadata
    from .gguf.tensors import loaded_nbytes

    entry = ModelEntry(str(path), name or path.name, origin=origin)
    try:
        entry.file_bytes = path.stat().st_size
        tensors = validate_gguf(path)  # a damaged or unsupported file says so here
        meta = read_metadata(path)
        arch = str(meta.get("general.architecture", "?"))
        entry.family = arch
        entry.context_length = int(meta.get(f"{arch}.context_length", 0) or 0)
        entry.parameters = sum(math.prod(t.dims) for t in tensors)
        entry.quantization = _gguf_quantization(tensors, meta)
        heads = int(meta[f"{arch}.attention.head_count"])
        kv_heads = int(meta.get(f"{arch}.attention.head_count_kv") or heads)
        head_dim = int(meta.get(f"{arch}.attention.key_length")
                       or int(meta[f"{arch}.embedding_length"]) // heads)
        # Tandem computes in the dtype the float tensors promote to: a GGUF's
        # norms are F32 (llama.cpp keeps them so), and then so is its KV.
        kv_bytes = 4 if any(t.type == "F32" for t in tensors) else 2
        entry.shape = ModelShape(num_layers=int(meta[f"{arch}.block_count"]),
                                 num_kv_heads=kv_heads, head_dim=head_dim,
                                 kv_dtype_bytes=kv_bytes,
                                 weight_bytes=sum(loaded_nbytes(t) for t in tensors),
                                 dense_params=entry.parameters,
                                 context_length=entry.context_length or 4096,
                                 is_quantized=entry.quantization not in ("F32", "F16", "BF16"))
    except Exception as e:  # EngineError from the walk, missing keys, an unreadable file
        entry.problem = str(e) if not isinstance(e, KeyError) else f"missing metadata {e}"
    return entry


_FILE_TYPES = {2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 15: "Q4_K_M",
               14: "Q4_K_S", 17: "Q5_K_M", 16: "Q5_K_S", 18: "Q6_K", 0: "F32", 1: "F16",
               32: "BF16"}


def _gguf_quantization(tensors, meta) -> str:
    """The file's quantization as people name it (Q4_K_M, ...): llama.cpp's
    `general.file_type`, else the type most of its bytes are in."""
    named = _FILE_TYPES.get(int(meta.get("general.file_type", -1) or -1))
    if named:
        return named
    by_type: dict[str, int] = {}
    for t in tensors:
        by_type[t.type] = by_type.get(t.type, 0) + t.nbytes
    return max(by_type, key=by_type.get) if by_type else "?"


def judge(entry: ModelEntry, budget_bytes: int, has_gpu: bool, unified: bool = True,
          cpu_matmul: str | None = None) -> None:
    """Set the entry's verdict: runs hybrid / runs GPU-only / runs CPU-only /
    does not fit, with the plan's numbers: the plan the engine would make at
    load, a CPU lane of a quantized model asking for a float32 copy only where
    this machine's probe (`MemoryPlan.cpu_matmul`, from the engine loaded
    now) chose one (no Tandem kernels here), as engine/runtime/placement.py
    does; else the quantized weights, shared."""
    if entry.problem or entry.shape is None:
        entry.verdict, entry.verdict_detail = "cannot load", entry.problem or "unknown format"
        return
    cpu = lane_request("cpu", "cpu", entry.shape.is_quantized, cpu_matmul)
    lanes = [LaneRequest("gpu", "gpu"), cpu] if has_gpu else [cpu]
    plan = plan_memory(entry.shape, lanes, budget_bytes, unified_memory=unified)
    if entry.shape.is_quantized:  # its CPU lane's matmul, as the engine would run it
        plan = replace(plan, cpu_matmul=cpu_matmul)
    on = [lp for lp in plan.lanes if lp.enabled]
    needed = entry.shape.weight_bytes + 512 * 2**20
    if not on or needed > budget_bytes:
        entry.verdict = "does not fit"
        entry.verdict_detail = (f"needs about {format_bytes(needed)} with its KV, "
                                f"{format_bytes(budget_bytes)} available")
        return
    if has_gpu:
        entry.verdict = "runs hybrid" if len(on) == 2 else "runs GPU-only"
    else:
        entry.verdict = "runs CPU-only"
    entry.verdict_detail = "; ".join(plan.describe())


def hub_cache_models(cache_dir: str | Path | None = None) -> list[ModelEntry]:
    """Model repos in the Hugging Face cache (their newest snapshot)."""
    try:
        from huggingface_hub import scan_cache_dir

        info = scan_cache_dir(cache_dir)
    except Exception:  # no cache yet, or unreadable: nothing to list
        return []
    entries = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model" or not repo.revisions:
            continue
        newest = max(repo.revisions, key=lambda r: r.last_modified)
        folder = Path(newest.snapshot_path)
        ggufs = sorted(folder.glob("*.gguf"))
        if (folder / "config.json").exists():
            entries.append(describe_folder(folder, "hub-cache", repo.repo_id))
        for gguf in ggufs:
            entries.append(describe_gguf(gguf, "hub-cache", f"{repo.repo_id}/{gguf.name}"))
    return entries
