// Tandem's elementwise kernels for MLX's CPU stream: plain C++, no MLX.
//
// swiglu: y = silu(gate) * x = gate * sigmoid(gate) * x, the MLP activation of
// most models mlx-lm runs. MLX's CPU build computes it on scalar exp with a
// libm call per element (~14 ns an element here: 16 streams of a 135M model
// spent a sixth of each decode step there); these are vectorized. sigmoid is
// taken as 1 / (1 + e) or e / (1 + e) with e = exp(-|gate|) (never
// overflows); NaN gives NaN, silu(+inf) = +inf, silu(-inf) = NaN (-inf x 0,
// as MLX's); below exp(-87.3) the AVX2 exp flushes to 0 (outputs under 1e-30).
#pragma once

#include <cstddef>

#include "attention.h"  // Dtype

namespace tk {

// Elements [i0, i1) of gate, x and y (each of `type`, contiguous).
void swiglu_generic(const void* gate, const void* x, void* y, Dtype type, size_t i0, size_t i1);
void swiglu_avx2(const void* gate, const void* x, void* y, Dtype type, size_t i0, size_t i1);

// The float64 reference, for tests.
double swiglu_reference(double gate, double x);

}  // namespace tk
