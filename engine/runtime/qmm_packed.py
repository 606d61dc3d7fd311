"""The CPU lane's own weight layout for Tandem's x86 kernels (issue 51):
8 columns' uint32 words interleaved, so one vector load gives a word of 8
columns and a block's 8 sums are scaled at once (native/tandem_kernels
src/packed_impl.h: 2.2-2.5x the MLX layout's kernel a call, measured in
benchmarks/RESULTS.md).

A layer is packed in place, at load, and only where no GPU lane shares its
arrays (engine/runtime/placement.py): the packed arrays replace MLX's, the
same bytes (plus at most 7 zero columns), never a second copy. A packed
layer runs only on a CPU stream: MLX's own op cannot read the layout, so a
model is packed only where Tandem's kernels are the CPU lane's path.
`TANDEM_CPU_PACK=0` keeps MLX's layout (benchmarks, bisecting).
"""

from __future__ import annotations

import os

import mlx.core as mx
import mlx.nn as nn


def wanted(ext) -> bool:
    """Whether layers should be packed: the kernels loaded, running x86's
    kernels (int16 activations, or int8 on AVX-512 VNNI where asked for),
    not switched off."""
    if ext is None or os.environ.get("TANDEM_CPU_PACK", "").strip() == "0":
        return False
    return ext.isa() in PACKED_ISAS


PACKED_ISAS = ("avx2", "avx512vnni", "avx512vnni-int8")


def pack_arrays(w: mx.array, scales: mx.array, biases: mx.array):
    """MLX's (N, words) weights and (N, groups) scales and biases in the
    packed layout: (ceil(N / 8), words, 8) and (ceil(N / 8), groups, 8),
    zero columns padding N to a multiple of 8."""
    n = w.shape[0]
    pad = -n % 8

    def interleave(a: mx.array) -> mx.array:
        if pad:
            a = mx.pad(a, [(0, pad), (0, 0)])
        return mx.contiguous(a.reshape(-1, 8, a.shape[1]).transpose(0, 2, 1))

    return interleave(w), interleave(scales), interleave(biases)


class PackedLinear(nn.QuantizedLinear):
    """A QuantizedLinear whose weights are packed: Tandem's kernels on a CPU
    stream, nothing else can read them."""

    def _extra_repr(self):
        return (f"input_dims={self['weight'].shape[1] * 32 // self.bits}, "
                f"output_dims={self.columns}, bias={'bias' in self}, "
                f"group_size={self.group_size}, bits={self.bits}, packed")

    def __call__(self, x):
        x = self.ext.quantized_matmul_packed(
            x, self["weight"], self["scales"], self["biases"], self.columns,
            self.group_size, self.bits)
        return x + self["bias"] if "bias" in self else x


class PackedEmbedding(nn.QuantizedEmbedding):
    """A QuantizedEmbedding whose weights are packed: the lookup gathers a
    token's column from its group of 8; the tied output head runs the
    kernels."""

    def _extra_repr(self):
        return (f"{self.columns}, {self['weight'].shape[1] * 32 // self.bits}, "
                f"group_size={self.group_size}, bits={self.bits}, packed")

    def __call__(self, x):
        group, lane = x // 8, x % 8
        return mx.dequantize(self["weight"][group, :, lane], scales=self["scales"][group, :, lane],
                             biases=self["biases"][group, :, lane], group_size=self.group_size,
                             bits=self.bits, mode=self.mode)

    def as_linear(self, x):
        return self.ext.quantized_matmul_packed(
            x, self["weight"], self["scales"], self["biases"], self.columns,
            self.group_size, self.bits)


def pack(module, ext) -> None:
    """Pack one QuantizedLinear or QuantizedEmbedding in place for the
    kernels' module `ext` (evaluated at once, layer by layer: the old arrays
    are freed as the new ones land)."""
    columns = module["weight"].shape[0]
    with mx.stream(mx.cpu):  # never a GPU's kernels (compiled at first use)
        w, scales, biases = pack_arrays(module["weight"], module["scales"], module["biases"])
        mx.eval(w, scales, biases)
    module["weight"], module["scales"], module["biases"] = w, scales, biases
    module.columns, module.ext = columns, ext
    module.__class__ = PackedLinear if isinstance(module, nn.QuantizedLinear) else PackedEmbedding
