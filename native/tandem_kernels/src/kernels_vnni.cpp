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

// int16 activations: a block's products summed by two vpdpwssd (the same
// integers as kernels_avx2.cpp's vpmaddwd and add).
struct Dpwssd {
  using Weights = Int16Weights;
  using Block = Int16Block;
  static __m256i sum(const Weights& w, const Block& x) {
    return _mm256_dpwssd_epi32(_mm256_dpwssd_epi32(_mm256_setzero_si256(), w.first, x.first),
                               w.second, x.second);
  }
};

// int8 activations (QuantizedRows::q8): one vpdpbusd of the block's 32
// unsigned weights (for 4 bits the low nibbles, even k, then the high
// nibbles, odd k: the order quantize_rows gives activations; for 8 bits k in
// order) with its 32 signed activations.
struct Dpbusd {
  struct Weights {
    __m256i bytes;
    template <int BITS>
    static Weights of(const uint8_t* p) {
      if constexpr (BITS == 4) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        const __m256i both =
            _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
        return {_mm256_and_si256(both, _mm256_set1_epi8(0x0f))};
      } else {
        return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))};
      }
    }
  };
  struct Block {
    __m256i bytes;
    static Block of(const QuantizedRows& x, int m, int b) {
      return {_mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(x.q8 + size_t(m) * x.K + b * BLOCK))};
    }
  };
  static __m256i sum(const Weights& w, const Block& x) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w.bytes, x.bytes);
  }
};

template <int R, int C, int BITS, bool INT8>
inline void some_rows(const QuantizedRows& x, const Weights& w, float* y, int m0, int n0,
                      int n1) {
  if constexpr (INT8) {
    rows_of<Dpbusd, R, C, BITS>(x, w, y, m0, n0, n1);
  } else {
    rows_of<Dpwssd, R, C, BITS>(x, w, y, m0, n0, n1);
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

// Packed weights: a pair's products added to the lane's sum by one vpdpwssd.
struct DpwssdAcc {
  static __m256i dot(__m256i acc, __m256i w, __m256i x) { return _mm256_dpwssd_epi32(acc, w, x); }
};

#include "packed_impl.h"

// int8 activations (x.q8, s = amax / 127; 4-bit weights: each 8 positions
// in the order [0 2 4 6 1 3 5 7], 8-bit: in order): a word's low nibbles
// (or its 4 bytes) meet 4 activations in one vpdpbusd (unsigned weights x
// signed activations, exact in int32), its high nibbles the next 4.
struct Int8Packed {
  template <int BITS>
  static constexpr int parts() { return BITS == 4 ? 2 : 1; }
  template <int BITS>
  static __m256i part(__m256i raw, int s) {
    if constexpr (BITS == 4) {
      return _mm256_and_si256(_mm256_srli_epi16(raw, 4 * s), _mm256_set1_epi8(0x0f));
    } else {
      return raw;
    }
  }
  static constexpr int PER = 4;
  static int32_t act(const QuantizedRows& x, size_t at) {
    int32_t quad;
    __builtin_memcpy(&quad, x.q8 + at, 4);
    return quad;
  }
  static __m256i dot(__m256i acc, __m256i w, __m256i x) { return _mm256_dpbusd_epi32(acc, w, x); }
};

}  // namespace

void quantize_rows_int8(const float* x, int M, int K, int bits, int8_t* q, float* scale,
                        float* sum, uint8_t* bad) {
  quantize_rows_as<int8_t>(x, M, K, bits, QMAX8, q, scale, sum, bad);
}

// Reads x.q8 (int8 activations, packed order) where set, else x.q (int16).
void qmm_packed_vnni(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1) {
  if (x.q8 != nullptr) return packed_qmm<Int8Packed>(x, w, y, n0, n1);
  packed_qmm<Int16Packed<DpwssdAcc>>(x, w, y, n0, n1);
}

// quantize_rows_int8's bytes (K in order: bits = 8 there) reordered in place
// for packed 4-bit weights: each 8 as [0 2 4 6 1 3 5 7], one byte shuffle a
// 32 (8-bit weights take K in order).
void order_packed_int8(int8_t* q, int M, int K) {
  const __m256i order = _mm256_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15,
                                         0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
  for (size_t i = 0; i < size_t(M) * K; i += 32) {
    __m256i* at = reinterpret_cast<__m256i*>(q + i);
    _mm256_storeu_si256(at, _mm256_shuffle_epi8(_mm256_loadu_si256(at), order));
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
