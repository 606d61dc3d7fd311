// The AVX2 kernels (compiled with -mavx2 -mfma -mf16c; called only where
// cpu_has_avx2() says the CPU and the OS support them). Only this header and
// the intrinsics are included: no inline library code compiled with these
// flags can be the copy the linker keeps for the rest of the program.
#include <immintrin.h>

#include "qmm_kernels.h"

namespace tk {

namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_hadd_ps(s, s);
  s = _mm_hadd_ps(s, s);
  return _mm_cvtss_f32(s);
}

inline float scale_at(const void* data, ScaleType type, size_t i) {
  if (type == ScaleType::F16) return _cvtsh_ss(static_cast<const uint16_t*>(data)[i]);
  if (type == ScaleType::BF16) {
    const unsigned bits = unsigned(static_cast<const uint16_t*>(data)[i]) << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
  }
  return static_cast<const float*>(data)[i];
}

// 32 4-bit weights (16 bytes): the low nibbles (even k) in the low lane, the
// high nibbles (odd k) in the high lane, as quantize_rows orders activations.
inline __m256i unpack4(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i mask = _mm_set1_epi8(0x0f);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), mask), _mm_and_si128(v, mask));
}

// R rows from m0, columns [n0, n1): each weight block is unpacked once for R rows.
template <int R, int BITS>
void rows(const QuantizedRows& x, const Weights& w, float* y, int m0, int n0, int n1) {
  const int blocks = w.K / BLOCK, groups = w.K / w.group, per = w.group / BLOCK;
  const size_t row_bytes = size_t(w.K) * BITS / 8;
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int n = n0; n < n1; ++n) {
    const uint8_t* wr = reinterpret_cast<const uint8_t*>(w.w) + n * row_bytes;
    __m256 acc[R];
    float rest[R];
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm256_setzero_ps();
      rest[r] = 0.0f;
    }
    for (int g = 0; g < groups; ++g) {
      const float sw = scale_at(w.scales, w.type, size_t(n) * groups + g);
      const float bw = scale_at(w.biases, w.type, size_t(n) * groups + g);
      for (int b = g * per; b < (g + 1) * per; ++b) {
        __m256i wv, wabs;
        if constexpr (BITS == 4) {
          wv = wabs = unpack4(wr + b * 16);
        } else {  // w - 128 as int8; |w - 128| meets sign-adjusted activations
          wv = _mm256_xor_si256(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + b * 32)), flip);
          wabs = _mm256_abs_epi8(wv);
        }
        for (int r = 0; r < R; ++r) {
          const size_t at = size_t(m0 + r) * blocks + b;
          __m256i qv = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(x.q + size_t(m0 + r) * w.K + b * BLOCK));
          if constexpr (BITS == 8) qv = _mm256_sign_epi8(qv, wv);
          const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, qv), ones);
          const float d = x.scale[at] * sw;
          acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(d), acc[r]);
          if constexpr (BITS == 8) rest[r] += d * 128.0f * float(x.qsum[at]);
          rest[r] += bw * x.sum[at];
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      y[size_t(m0 + r) * w.N + n] =
          x.bad[m0 + r] ? __builtin_nanf("") : hsum(acc[r]) + rest[r];
    }
  }
}

template <int BITS>
void all_rows(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1) {
  int m = 0;
  for (; m + 4 <= x.M; m += 4) rows<4, BITS>(x, w, y, m, n0, n1);
  switch (x.M - m) {
    case 3: rows<3, BITS>(x, w, y, m, n0, n1); break;
    case 2: rows<2, BITS>(x, w, y, m, n0, n1); break;
    case 1: rows<1, BITS>(x, w, y, m, n0, n1); break;
    default: break;
  }
}

}  // namespace

void qmm_avx2(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1) {
  if (w.bits == 4) {
    all_rows<4>(x, w, y, n0, n1);
  } else {
    all_rows<8>(x, w, y, n0, n1);
  }
}

}  // namespace tk
