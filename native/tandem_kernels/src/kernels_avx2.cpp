// The AVX2 kernels (compiled with -mavx2 -mfma -mf16c; called only where
// cpu_has_avx2() says the CPU and the OS support them). Only our headers and
// the intrinsics are included: no inline library code compiled with these
// flags can be the copy the linker keeps for the rest of the program.
#include <immintrin.h>

#include "qmm_kernels.h"

namespace tk {

namespace {

#include "x86_helpers.h"

// A block's products by two vpmaddwd and their sum.
struct MaddDot {
  using Weights = Int16Weights;
  using Block = Int16Block;
  static __m256i sum(const Weights& w, const Block& x) {
    return _mm256_add_epi32(_mm256_madd_epi16(w.first, x.first),
                            _mm256_madd_epi16(w.second, x.second));
  }
};

// qmm_impl.h's rows: the shared blocking (x86_helpers.h) on vpmaddwd.
template <int R, int C, int BITS>
void rows(const QuantizedRows& x, const Weights& w, float* y, int m0, int n0, int n1) {
  rows_of<MaddDot, R, C, BITS>(x, w, y, m0, n0, n1);
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

// Packed weights: a pair's products by vpmaddwd, added to the lane's sum.
struct MaddAcc {
  static __m256i dot(__m256i acc, __m256i w, __m256i x) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(w, x));
  }
};

#include "packed_impl.h"

}  // namespace

// As quantize_rows (kernels_generic.cpp): the same scales and integers (both
// round to nearest even); a block's float sum in another order.
void quantize_rows_avx2(const float* x, int M, int K, int bits, int16_t* q, float* scale,
                        float* sum, uint8_t* bad) {
  quantize_rows_as<int16_t>(x, M, K, bits, QMAX, q, scale, sum, bad);
}

// order_packed by one byte shuffle per 16 values: within each 8 (4-bit)
// int16 [0 4 1 5 2 6 3 7], within each 4 (8-bit) [0 2 1 3].
void order_packed_avx2(int16_t* q, int M, int K, int bits) {
  const __m256i order = bits == 4
      ? _mm256_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15,
                         0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15)
      : _mm256_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15,
                         0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15);
  for (size_t i = 0; i < size_t(M) * K; i += 16) {  // K is a multiple of 32
    __m256i* at = reinterpret_cast<__m256i*>(q + i);
    _mm256_storeu_si256(at, _mm256_shuffle_epi8(_mm256_loadu_si256(at), order));
  }
}

void dequantize_avx2(const Weights& w, int n0, int n1, float* out) {
  dequantize_columns(w, n0, n1, out);
}

void qmm_avx2(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1) {
  qmm_rows(x, w, y, n0, n1);
}

void qmm_packed_avx2(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1) {
  packed_qmm<Int16Packed<MaddAcc>>(x, w, y, n0, n1);
}

void dequantize_packed_avx2(const Weights& w, int n0, int n1, float* out, int ld) {
  packed_dequantize(w, n0, n1, out, ld);
}

}  // namespace tk
