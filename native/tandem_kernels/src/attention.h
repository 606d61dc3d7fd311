// Tandem's attention for few queries on MLX's CPU stream (decode steps,
// verify steps, batched decodes): plain C++, no MLX.
//
// o[b, h, l] = sum_n softmax_n(scale * q[b, h, l] . k[b, h / rep, n] + mask) v[b, h / rep, n]
//
// MLX's CPU path for the same call builds eight ops (two sgemms that pack
// their operands every call, a softmax on scalar exp) and costs 20-700 us a
// layer here; this reads each key and value row once per query head, in two
// passes (scores, then the weighted sum), in float32 whatever the inputs'
// dtype. Rows whose scores hold NaN, +inf or only masked keys give NaN, as
// the float softmax does (exp(-inf - -inf), inf - inf).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tk {

enum class Dtype : int { F32 = 0, F16 = 1, BF16 = 2 };

struct Tensor4 {  // a view: element strides for the first three axes, the last contiguous
  const void* data = nullptr;
  Dtype type = Dtype::F32;
  int64_t s0 = 0, s1 = 0, s2 = 0;
};

struct AttentionArgs {
  int B = 0, Hq = 0, Hkv = 0, L = 0, N = 0, D = 0;
  float scale = 1.0f;
  Tensor4 q, k, v;  // q: (B, Hq, L, D); k, v: (B, Hkv, N, D)
  bool causal = false;  // key n is seen by query l where n <= N - L + l
  // An additive float mask, or a boolean one (true: attend), broadcast by
  // strides (0 on a broadcast axis): element (b, h, l, n) at
  // b * m0 + h * m1 + l * m2 + n * m3.
  const void* mask = nullptr;
  bool mask_bool = false;
  int64_t m0 = 0, m1 = 0, m2 = 0, m3 = 0;
  float* out = nullptr;  // (B, Hq, L, D), contiguous, float32
};

// Query heads [h0, h1) of the flattened (b, h) axis, every query row;
// scratch: L * (N + D) floats (reused head after head).
void attention_generic(const AttentionArgs& a, int h0, int h1, float* scratch);
void attention_avx2(const AttentionArgs& a, int h0, int h1, float* scratch);

// The float64 reference, for tests.
void attention_reference(const AttentionArgs& a, double* out);

}  // namespace tk
