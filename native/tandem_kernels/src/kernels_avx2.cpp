// The AVX2 kernels (compiled with -mavx2 -mfma -mf16c; called only where
// cpu_has_avx2() says the CPU and the OS support them). Only our headers and
// the intrinsics are included: no inline library code compiled with these
// flags can be the copy the linker keeps for the rest of the program.
#include <immintrin.h>

#include "qmm_kernels.h"

namespace tk {

namespace {

#include "x86_helpers.h"

// 32 weights of a block as two vectors of 16 int16: for 4 bits (16 bytes)
// the low nibbles (even k) then the high nibbles (odd k), the order
// quantize_rows gives activations; for 8 bits (32 bytes) k in order.
template <int BITS>
inline void unpack(const uint8_t* p, __m256i& first, __m256i& second) {
  if constexpr (BITS == 4) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i mask = _mm_set1_epi8(0x0f);
    first = _mm256_cvtepu8_epi16(_mm_and_si128(v, mask));
    second = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(v, 4), mask));
  } else {
    first = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    second = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
  }
}

// R rows from m0, columns [n0, n1), C columns at a time: each weight block
// is unpacked once for R rows, each activation block loaded once for C
// columns; R x C accumulators, independent chains (one row alone was bound
// by the latency of a single accumulator's fma chain). A block's 32
// products are summed exactly in int32 (madd), then scaled.
template <int R, int C, int BITS>
void rows(const QuantizedRows& x, const Weights& w, float* y, int m0, int n0, int n1) {
  const int blocks = w.K / BLOCK, groups = w.K / w.group, per = w.group / BLOCK;
  const size_t row_bytes = size_t(w.K) * BITS / 8;
  int n = n0;
  for (; n + C <= n1; n += C) {
    const uint8_t* wr[C];
    __m256 acc[R][C];
    float rest[R][C];
    for (int c = 0; c < C; ++c) {
      wr[c] = reinterpret_cast<const uint8_t*>(w.w) + (n + c) * row_bytes;
      for (int r = 0; r < R; ++r) {
        acc[r][c] = _mm256_setzero_ps();
        rest[r][c] = 0.0f;
      }
    }
    for (int g = 0; g < groups; ++g) {
      float sw[C], bw[C];
      for (int c = 0; c < C; ++c) {
        sw[c] = scale_at(w.scales, w.type, size_t(n + c) * groups + g);
        bw[c] = scale_at(w.biases, w.type, size_t(n + c) * groups + g);
      }
      for (int b = g * per; b < (g + 1) * per; ++b) {
        __m256i w0[C], w1[C];
        for (int c = 0; c < C; ++c) unpack<BITS>(wr[c] + b * BLOCK * BITS / 8, w0[c], w1[c]);
        for (int r = 0; r < R; ++r) {
          const size_t at = size_t(m0 + r) * blocks + b;
          const int16_t* q = x.q + size_t(m0 + r) * w.K + b * BLOCK;
          const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
          const __m256i q1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 16));
          const float sx = x.scale[at], xs = x.sum[at];
          for (int c = 0; c < C; ++c) {
            const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(w0[c], q0),
                                                 _mm256_madd_epi16(w1[c], q1));
            acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(sx * sw[c]),
                                        acc[r][c]);
            rest[r][c] += bw[c] * xs;
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) {
        y[size_t(m0 + r) * w.N + n + c] =
            x.bad[m0 + r] ? __builtin_nanf("") : hsum(acc[r][c]) + rest[r][c];
      }
    }
  }
  if constexpr (C > 1) {
    if (n < n1) rows<R, 1, BITS>(x, w, y, m0, n, n1);
  }
}

// One row's K weights as floats, 16 at a time (a group is 32 or more).
template <int BITS>
void dequantize_row(const uint8_t* wr, const Weights& w, size_t first_group, float* o) {
  const int groups = w.K / w.group;
  for (int g = 0; g < groups; ++g) {
    const __m256 sw = _mm256_set1_ps(scale_at(w.scales, w.type, first_group + g));
    const __m256 bw = _mm256_set1_ps(scale_at(w.biases, w.type, first_group + g));
    for (int k = g * w.group; k < (g + 1) * w.group; k += 16) {
      __m128i v;
      if constexpr (BITS == 4) {  // 8 bytes: low nibble is k, high nibble k + 1
        const __m128i packed = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(wr + k / 2));
        const __m128i mask = _mm_set1_epi8(0x0f);
        v = _mm_unpacklo_epi8(_mm_and_si128(packed, mask),
                              _mm_and_si128(_mm_srli_epi16(packed, 4), mask));
      } else {
        v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wr + k));
      }
      const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
      const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)));
      _mm256_storeu_ps(o + k, _mm256_fmadd_ps(sw, lo, bw));
      _mm256_storeu_ps(o + k + 8, _mm256_fmadd_ps(sw, hi, bw));
    }
  }
}

#include "qmm_impl.h"

}  // namespace

// As quantize_rows (kernels_generic.cpp): the same scales and integers (both
// round to nearest even); a block's float sum in another order.
void quantize_rows_avx2(const float* x, int M, int K, int bits, int16_t* q, float* scale,
                        float* sum, uint8_t* bad) {
  const int blocks = K / BLOCK;
  for (int m = 0; m < M; ++m) {
    const float* row = x + size_t(m) * K;
    bad[m] = !row_finite(row, K);
    int16_t* qr = q + size_t(m) * K;
    if (bad[m]) {
      for (int i = 0; i < K; ++i) qr[i] = 0;
      for (int b = 0; b < blocks; ++b) scale[size_t(m) * blocks + b] = sum[size_t(m) * blocks + b] = 0.0f;
      continue;
    }
    for (int b = 0; b < blocks; ++b) {
      __m256 v[4];
      float amax, s;
      block_stats(row + b * BLOCK, v, amax, s);
      const float d = amax / QMAX;
      const size_t at = size_t(m) * blocks + b;
      scale[at] = d;
      sum[at] = s;
      alignas(32) int32_t ints[BLOCK];
      block_ints(v, d > 0.0f ? 1.0f / d : 0.0f, int(QMAX), ints);
      int16_t* qb = qr + b * BLOCK;
      if (bits == 4) {  // the 16 even positions, then the 16 odd ones
        for (int j = 0; j < 16; ++j) {
          qb[j] = int16_t(ints[2 * j]);
          qb[16 + j] = int16_t(ints[2 * j + 1]);
        }
      } else {
        for (int j = 0; j < BLOCK; ++j) qb[j] = int16_t(ints[j]);
      }
    }
  }
}

void dequantize_avx2(const Weights& w, int n0, int n1, float* out) {
  dequantize_columns(w, n0, n1, out);
}

void qmm_avx2(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1) {
  qmm_rows(x, w, y, n0, n1);
}

}  // namespace tk
