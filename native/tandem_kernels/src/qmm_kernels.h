// Tandem's quantized matmul kernels for MLX's CPU stream: plain C++, no MLX.
//
// y[m, n] = sum_k x[m, k] * (scales[n, g] * q[n, k] + biases[n, g]),  g = k / group
//
// q is MLX's affine format as QuantizedLinear stores it (transpose=True): row n
// of `w` packs K values, `bits` each, low bits first, into uint32 words.
// Activations are quantized to int16 per 32-element block (s = amax / 32767,
// q = round(x / s): int8 lost too much of small models' heavy-tailed
// activations, where a block's median value is a hundredth of its largest);
// each block's integer dot product with the weights (exact in int32) is
// scaled by s * scales[n, g], and biases[n, g] meets the exact float sum of
// the block's activations. A row holding NaN or +-inf gives NaN in every
// output of that row (a float matmul would give NaN or inf there too).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tk {

constexpr int BLOCK = 32;      // activations per scale
constexpr float QMAX = 32767.0f;  // activations' integer range
constexpr float QMAX8 = 127.0f;   // the same on the int8 path (AVX-512 VNNI, kernels_vnni.cpp)

enum class ScaleType : int { F32 = 0, F16 = 1, BF16 = 2 };

// One row block of quantized activations (what the kernels read).
struct QuantizedRows {
  int M = 0, K = 0, bits = 4;
  const int16_t* q = nullptr;  // M x K, per block: 4-bit weights' order (evens, then odds)
  const float* scale = nullptr;  // M x K/32
  const float* sum = nullptr;    // M x K/32: exact float sum of each block's x
  const uint8_t* bad = nullptr;  // M: the row held NaN or inf
  const int8_t* q8 = nullptr;    // the int8 path's M x K (scale: amax / 127), same order
};

struct Weights {
  int N = 0, K = 0, bits = 4, group = 64;
  const uint32_t* w = nullptr;   // N x K*bits/32
  const void* scales = nullptr;  // N x K/group
  const void* biases = nullptr;  // N x K/group
  ScaleType type = ScaleType::F32;
  // Packed (the CPU lane's own layout, engine/runtime/qmm.py `pack`): columns
  // in groups of 8, each group's uint32 words interleaved, word t of column
  // 8j + c at w[(j * words + t) * 8 + c] (words = K * bits / 32), scales and
  // biases at [(j * groups + g) * 8 + c]; N padded to a multiple of 8 with
  // zero columns, of which only the first N are written. One vector load
  // gives 8 columns' words: the kernels scale 8 columns' sums at once.
  bool packed = false;
};

// Packed activations: within each uint32 word's E = 32 / bits positions,
// the pairs (s, s + E / 2) for s = 0 .. E/2 - 1, as int16 pairs; a 16-bit
// half of a packed word shifted by bits * s and masked gives that pair.
static inline int packed_source(int i, int bits) {  // static: no copy compiled with ISA flags is shared
  const int E = 32 / bits, e = i % E;
  return i - e + e / 2 + (e % 2) * (E / 2);
}

// Quantize M rows of K float activations (K a multiple of 32) into the
// caller's buffers, laid out for `bits`.
void quantize_rows(const float* x, int M, int K, int bits, int16_t* q, float* scale,
                   float* sum, uint8_t* bad);
void quantize_rows_avx2(const float* x, int M, int K, int bits, int16_t* q, float* scale,
                        float* sum, uint8_t* bad);
// The int8 path's: s = amax / 127 a block (AVX-512 VNNI CPUs only).
void quantize_rows_int8(const float* x, int M, int K, int bits, int8_t* q, float* scale,
                        float* sum, uint8_t* bad);

// quantize_rows' int16 (K in order: bits = 8 there) reordered in place for
// packed weights of `bits` (packed_source).
void order_packed(int16_t* q, int M, int K, int bits);
void order_packed_avx2(int16_t* q, int M, int K, int bits);  // the same, AVX2

// y[m, n] for n in [n0, n1), every row m; y is M x N, row-major.
void qmm_generic(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1);
void qmm_avx2(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1);
void qmm_vnni(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1);  // reads q8
void qmm_neon(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1);  // arm64
// Packed weights (Weights::packed), int16 activations in packed order; n0 a
// multiple of 8.
void qmm_packed_generic(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1);
void qmm_packed_avx2(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1);
void qmm_packed_vnni(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1);  // or q8
// quantize_rows_int8's bytes (in K's order) reordered for packed 4-bit weights.
void order_packed_int8(int8_t* q, int M, int K);

// Many rows (a prefill chunk, a wide batch): the weights of columns [n0, n1)
// dequantized to float32, row n - n0 of `out` (K floats each), exactly
// scales * q + biases; the caller multiplies them with sgemm. Only a panel of
// columns at a time: never a float32 copy of the whole matrix.
void dequantize_generic(const Weights& w, int n0, int n1, float* out);
void dequantize_avx2(const Weights& w, int n0, int n1, float* out);
void dequantize_neon(const Weights& w, int n0, int n1, float* out);  // arm64
// Packed columns [n0, n1) (n0 a multiple of 8) dequantized K-major:
// out[k * ld + n - n0], for sgemm untransposed.
void dequantize_packed_generic(const Weights& w, int n0, int n1, float* out, int ld);
void dequantize_packed_avx2(const Weights& w, int n0, int n1, float* out, int ld);

// The float64 reference, for tests: the dequantized weights times x exactly
// (either layout).
void qmm_reference(const float* x, int M, const Weights& w, double* y);

bool cpu_has_avx2();  // AVX2, FMA and F16C, with the OS saving their registers
bool cpu_has_avx512vnni();  // and AVX2: AVX-512 F, BW, VL and VNNI, with the OS saving their state

float half_to_float(uint16_t h);  // IEEE binary16 to float, exactly (subnormals, inf, NaN)

}  // namespace tk
