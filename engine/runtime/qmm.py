"""Tandem's quantized matmul for MLX's CPU stream (issue 51): the kernels in
native/tandem_kernels, built into this folder by `make kernels`
(tools/build_kernels.py), or MLX's own `mx.quantized_matmul` where they are
not built or do not fit this MLX. Nothing here runs on a GPU stream.

`status()` says which and why, once a process has asked. The module is only
trusted after it has proved itself at load: built for this MLX version,
linked to the libmlx this process runs, taking MLX's arrays (a nanobind of
another ABI refuses every call), and agreeing with MLX's op on a small case.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn

from . import qmm_packed

HERE = Path(__file__).resolve().parent
STATUS_FILE = HERE / "_tandem_kernels.status"
FORMATS = {(bits, group) for bits in (4, 8) for group in (32, 64, 128)}  # affine
SMOKE_ERROR = 0.05  # the smoke case's largest error, relative to its largest output

_lock = threading.Lock()
_state: dict = {}


PATHS = ("tandem", "mlx", "float32")  # TANDEM_CPU_MATMUL's values


def forced() -> str | None:
    """The CPU lane's matmul path TANDEM_CPU_MATMUL forces (benchmarks,
    bisecting): "tandem" (the kernels on the quantized weights), "mlx" (MLX's
    op on them) or "float32" (a float32 copy); None: the load-time probe's
    choice (engine/runtime/cpu_matmul.py)."""
    value = os.environ.get("TANDEM_CPU_MATMUL", "").strip().lower()
    return value if value in PATHS else None


def activations() -> str:
    """The kernels' activations: "int16" (the default: perplexity 1.0000x the
    float32 path on the bundled model) or "int8" (TANDEM_CPU_ACTIVATIONS=int8
    where the CPU has AVX-512 VNNI: 5-16% faster than int16 there, packed or not,
    perplexity 1.017x; benchmarks/RESULTS.md)."""
    value = os.environ.get("TANDEM_CPU_ACTIVATIONS", "").strip().lower()
    return "int8" if value == "int8" else "int16"


def _load():
    """(the module, None) or (None, why not): for the quantized layers."""
    forced_path = forced()
    if forced_path in ("mlx", "float32"):
        return None, f"TANDEM_CPU_MATMUL={forced_path}"
    ext = extension()
    if ext is not None:
        # TANDEM_CPU_KERNELS forces an instruction set this CPU runs (benchmarks,
        # bisecting: generic, avx2, avx512vnni, avx512vnni-int8, neon).
        wanted = os.environ.get("TANDEM_CPU_KERNELS", "").strip().lower()
        if activations() == "int8" and "avx512vnni-int8" in ext.isas():
            wanted = "avx512vnni-int8"
        if wanted in ext.isas():
            ext.force_isa(wanted)
    return ext, _state["ext_why"]


def _load_extension():
    """(the module, None) or (None, why not), whatever path is forced."""
    try:
        from . import _tandem_kernels as ext
    except ImportError as e:
        said = STATUS_FILE.read_text(encoding="utf-8").strip() if STATUS_FILE.exists() else ""
        why = said if said.startswith("not built") else f"not built ({e})"
        return None, why
    if ext.MLX_VERSION != mx.__version__ or ext.runtime_mlx_version() != mx.__version__:
        return None, (f"built for MLX {ext.MLX_VERSION}, this is MLX {mx.__version__}: "
                      "make kernels rebuilds it")
    try:
        ext.abi_probe(mx.zeros((1,)))
    except TypeError:
        return None, (f"its nanobind ({ext.NANOBIND_VERSION}) cannot take this MLX's arrays: "
                      "make kernels rebuilds it")
    problem = _smoke(ext)
    if problem:
        return None, problem
    return ext, None


def _smoke(ext) -> str | None:
    """A 4-bit and an 8-bit case against MLX's op; the problem, if any."""
    key = mx.random.key(7)
    x = mx.random.normal((3, 128), key=key)
    w = mx.random.normal((40, 128), key=mx.random.split(key)[0])
    for bits in (4, 8):
        q, s, b = mx.quantize(w, group_size=32, bits=bits)
        with mx.stream(mx.cpu):
            ours = ext.quantized_matmul(x, q, s, b, 32, bits)
            theirs = mx.quantized_matmul(x, q, s, b, transpose=True, group_size=32, bits=bits)
            error = (mx.abs(ours - theirs).max() / mx.abs(theirs).max()).item()
        if not error <= SMOKE_ERROR:
            return f"its {bits}-bit result is off by {error:.3f} of MLX's: not used"
    return None


def extension():
    """The built module where it proved itself at load, else None (its other
    kernels, attention.py's, are used whatever TANDEM_CPU_MATMUL forces)."""
    with _lock:
        if "extension" not in _state:
            _state["extension"], _state["ext_why"] = _load_extension()
        return _state["extension"]


def kernels():
    """The loaded module for the quantized layers, or None (then `status()`
    says why)."""
    if "ext" not in _state:
        ext, why = _load()  # outside the lock: extension() takes it
        with _lock:
            if "ext" not in _state:  # the first choice stands for the process
                _state["ext"], _state["why"] = ext, why
    return _state["ext"]


def status() -> tuple[str, str]:
    """("tandem", "avx2 kernels") or ("mlx", why the kernels are not used)."""
    ext = kernels()
    if ext is not None:
        int8 = " (int8 activations)" if ext.isa().endswith("-int8") else ""
        return "tandem", f"{ext.isa()} kernels{int8}"
    return "mlx", _state["why"]


def cpu_matmul() -> str:
    """Whether a CPU lane's quantized layers can run Tandem's kernels, in
    words (the self-test says it): "Tandem's avx2 kernels (forced)",
    "Tandem's avx2 kernels (...measured against MLX's op at each load)",
    "a float32 copy (forced)" or "MLX's op or a float32 copy (<why the
    kernels are not used>)". What a loaded model's lane runs is its memory
    plan's `cpu_matmul` (engine/runtime/cpu_matmul.py chooses)."""
    choice, detail = status()
    path = forced()
    if path == "float32":
        return "a float32 copy (forced)"
    if choice != "tandem":
        return f"MLX's op or a float32 copy, as measured at load ({detail})"
    if path == "tandem":
        return f"Tandem's {detail} (forced)"
    return f"Tandem's {detail} (measured against MLX's op at each model's load)"


def fits(bits: int, group_size: int, mode: str = "affine") -> bool:
    """Whether the kernels take this format (others run MLX's op)."""
    return mode == "affine" and (bits, group_size) in FORMATS


def quantized_matmul(x: mx.array, w: mx.array, scales: mx.array, biases: mx.array | None,
                     transpose: bool = True, group_size: int = 64, bits: int = 4,
                     mode: str = "affine") -> mx.array:
    """`mx.quantized_matmul`, run by Tandem's kernels where they apply: a CPU
    stream, an affine format they take, transposed weights (as
    QuantizedLinear keeps them)."""
    ext = kernels()
    if (ext is not None and biases is not None and transpose and fits(bits, group_size, mode)
            and mx.default_device() == mx.cpu):
        return ext.quantized_matmul(x, w, scales, biases, group_size, bits)
    return mx.quantized_matmul(x, w, scales, biases, transpose=transpose,
                               group_size=group_size, bits=bits, mode=mode)


class _KernelLinear(nn.QuantizedLinear):
    """A QuantizedLinear whose product runs Tandem's kernels on a CPU stream."""

    def __call__(self, x):
        x = quantized_matmul(x, self["weight"], self["scales"], self.get("biases"),
                             group_size=self.group_size, bits=self.bits, mode=self.mode)
        return x + self["bias"] if "bias" in self else x


class _KernelEmbedding(nn.QuantizedEmbedding):
    """A QuantizedEmbedding whose tied output head runs Tandem's kernels."""

    def as_linear(self, x):
        return quantized_matmul(x, self["weight"], self["scales"], self.get("biases"),
                                group_size=self.group_size, bits=self.bits, mode=self.mode)


def install(model: nn.Module, pack: bool = False) -> int:
    """Route `model`'s quantized layers through `quantized_matmul` (the same
    arrays: a GPU lane sharing them keeps MLX's kernels, chosen per call by
    the stream's device); how many layers now can. Nothing where the kernels
    are not used. `pack`: no GPU lane shares these arrays, so the layers
    take the kernels' own layout where it is faster (qmm_packed.py)."""
    ext = kernels()
    if ext is None:
        return 0
    packing = pack and qmm_packed.wanted(ext)
    count = 0
    for _, module in model.named_modules():
        if not (type(module) in (nn.QuantizedLinear, nn.QuantizedEmbedding) and _takes(module)):
            continue
        if packing:
            qmm_packed.pack(module, ext)
        else:
            module.__class__ = (_KernelLinear if type(module) is nn.QuantizedLinear
                                else _KernelEmbedding)
        count += 1
    return count


def _takes(module) -> bool:
    """The kernels' format, with arrays that agree with it (the loader
    refuses files whose tensors do not: engine/models/quantized_check.py;
    a layer built otherwise keeps MLX's op)."""
    biases = module.get("biases")
    return (fits(module.bits, module.group_size, module.mode) and biases is not None
            and biases.dtype == module["scales"].dtype
            and biases.shape == module["scales"].shape)
