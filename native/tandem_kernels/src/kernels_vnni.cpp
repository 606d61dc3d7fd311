// The kernels for x86 CPUs with AVX-512 VNNI (compiled with -mavx2 -mfma
// -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512vnni; called only where
// cpu_has_avx512vnni() says the CPU and the OS support them), 256-bit
// registers in their EVEX forms (32 of them), rows 3 at a time x 2 columns:
// - int16 activations (the default there): a block's products summed by two
//   vpdpwssd, the same integers as kernels_avx2.cpp;
// - int8 activations (only where asked for): quantized per 32-block with
//   s = amax / 127, llama.cpp's Q8 rule; one vpdpbusd multiplies a block's
//   32 unsigned weights with its 32 signed activations, exactly in int32.
// Only our headers and the intrinsics are included (see kernels_avx2.cpp).
#include <immintrin.h>

#include "qmm_kernels.h"

namespace tk {

namespace {

#include "x86_helpers.h"

// A block's 32 weights as 32 unsigned bytes: for 4 bits (16 bytes) the low
// nibbles (even k) then the high nibbles (odd k), the order quantize_rows
// gives activations; for 8 bits, k in order.
template <int BITS>
inline __m256i weights32(const uint8_t* p) {
  if constexpr (BITS == 4) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m256i both =
        _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
  } else {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
}

// 32 weights of a block as two vectors of 16 int16 (kernels_avx2.cpp's unpack).
template <int BITS>
inline void unpack16(const uint8_t* p, __m256i& first, __m256i& second) {
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

// The int16 activations' kernel (the default where the CPU has VNNI): as
// kernels_avx2.cpp's rows, the block's two multiply-adds and their sum in
// two vpdpwssd (exact in int32: the same integers), and the block's scale
// applied as (sum * sx) * sw with sx broadcast from memory and sw a vector
// shared by the rows.
template <int R, int C, int BITS>
void rows16(const QuantizedRows& x, const Weights& w, float* y, int m0, int n0, int n1) {
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
        for (int c = 0; c < C; ++c) unpack16<BITS>(wr[c] + b * BLOCK * BITS / 8, w0[c], w1[c]);
        for (int r = 0; r < R; ++r) {
          const size_t at = size_t(m0 + r) * blocks + b;
          const int16_t* q = x.q + size_t(m0 + r) * w.K + b * BLOCK;
          const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
          const __m256i q1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 16));
          const float sx = x.scale[at], xs = x.sum[at];
          for (int c = 0; c < C; ++c) {
            const __m256i dot = _mm256_dpwssd_epi32(
                _mm256_dpwssd_epi32(_mm256_setzero_si256(), w0[c], q0), w1[c], q1);
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
    if (n < n1) rows16<R, 1, BITS>(x, w, y, m0, n, n1);
  }
}

// R rows from m0, columns [n0, n1), C columns a pass (as kernels_avx2.cpp's
// rows): per block and row-column pair one vpdpbusd, then its sum scaled.
template <int R, int C, int BITS>
void rows8(const QuantizedRows& x, const Weights& w, float* y, int m0, int n0, int n1) {
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
        __m256i wv[C];
        for (int c = 0; c < C; ++c) wv[c] = weights32<BITS>(wr[c] + b * BLOCK * BITS / 8);
        for (int r = 0; r < R; ++r) {
          const size_t at = size_t(m0 + r) * blocks + b;
          const __m256i xq = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(x.q8 + size_t(m0 + r) * w.K + b * BLOCK));
          const float sx = x.scale[at], xs = x.sum[at];
          for (int c = 0; c < C; ++c) {
            const __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wv[c], xq);
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
    if (n < n1) rows8<R, 1, BITS>(x, w, y, m0, n, n1);
  }
}

template <int R, int C, int BITS, bool INT8>
inline void some_rows(const QuantizedRows& x, const Weights& w, float* y, int m0, int n0,
                      int n1) {
  if constexpr (INT8) {
    rows8<R, C, BITS>(x, w, y, m0, n0, n1);
  } else {
    rows16<R, C, BITS>(x, w, y, m0, n0, n1);
  }
}

// Rows 3 at a time, 2 columns a pass; 2 left: 2 columns; one row alone: 4.
// (qmm_impl.h's 4 rows and one column measured 0.9x the AVX2 kernel with
// these instructions; 3 x 2 1.3x at 4 and 16 rows.)
template <int BITS, bool INT8>
void all_rows(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1) {
  int m = 0;
  for (; m + 3 <= x.M; m += 3) some_rows<3, 2, BITS, INT8>(x, w, y, m, n0, n1);
  if (x.M - m == 2) some_rows<2, 2, BITS, INT8>(x, w, y, m, n0, n1);
  if (x.M - m == 1) some_rows<1, 4, BITS, INT8>(x, w, y, m, n0, n1);
}

}  // namespace

void quantize_rows_int8(const float* x, int M, int K, int bits, int8_t* q, float* scale,
                        float* sum, uint8_t* bad) {
  const int blocks = K / BLOCK;
  for (int m = 0; m < M; ++m) {
    const float* row = x + size_t(m) * K;
    bad[m] = !row_finite(row, K);
    int8_t* qr = q + size_t(m) * K;
    if (bad[m]) {
      for (int i = 0; i < K; ++i) qr[i] = 0;
      for (int b = 0; b < blocks; ++b) scale[size_t(m) * blocks + b] = sum[size_t(m) * blocks + b] = 0.0f;
      continue;
    }
    for (int b = 0; b < blocks; ++b) {
      __m256 v[4];
      float amax, s;
      block_stats(row + b * BLOCK, v, amax, s);
      const float d = amax / QMAX8;
      const size_t at = size_t(m) * blocks + b;
      scale[at] = d;
      sum[at] = s;
      alignas(32) int32_t ints[BLOCK];
      block_ints(v, d > 0.0f ? 1.0f / d : 0.0f, int(QMAX8), ints);
      int8_t* qb = qr + b * BLOCK;
      if (bits == 4) {  // the 16 even positions, then the 16 odd ones
        for (int j = 0; j < 16; ++j) {
          qb[j] = int8_t(ints[2 * j]);
          qb[16 + j] = int8_t(ints[2 * j + 1]);
        }
      } else {
        for (int j = 0; j < BLOCK; ++j) qb[j] = int8_t(ints[j]);
      }
    }
  }
}

// Reads x.q8 (int8 activations) where set, else x.q (int16).
void qmm_vnni(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1) {
  const bool int8 = x.q8 != nullptr;
  if (w.bits == 4) {
    int8 ? all_rows<4, true>(x, w, y, n0, n1) : all_rows<4, false>(x, w, y, n0, n1);
  } else {
    int8 ? all_rows<8, true>(x, w, y, n0, n1) : all_rows<8, false>(x, w, y, n0, n1);
  }
}

}  // namespace tk
