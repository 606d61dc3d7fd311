// The int8 kernels for x86 CPUs with AVX-512 VNNI (compiled with -mavx2 -mfma
// -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512vnni; called only where
// cpu_has_avx512vnni() says the CPU and the OS support them). Activations are
// quantized to int8 per 32-block (s = amax / 127, llama.cpp's Q8 rule); one
// vpdpbusd multiplies a block's 32 unsigned weights with its 32 signed
// activations and sums them in fours, exactly in int32 (256-bit registers,
// the EVEX forms: 32 of them). Only our headers and the intrinsics are
// included (see kernels_avx2.cpp).
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

// R rows from m0, columns [n0, n1), C columns a pass (as kernels_avx2.cpp's
// rows): per block and row-column pair one vpdpbusd, then its sum scaled.
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
    if (n < n1) rows<R, 1, BITS>(x, w, y, m0, n, n1);
  }
}

// qmm_impl.h's dequantize_columns needs a dequantize_row: the many-rows path
// runs the AVX2 one (kernels_avx2.cpp), never this.
template <int BITS>
void dequantize_row(const uint8_t*, const Weights&, size_t, float*) {}

#include "qmm_impl.h"

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

void qmm_vnni(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1) {
  qmm_rows(x, w, y, n0, n1);
}

}  // namespace tk
