// The elementwise kernels with AVX2/FMA/F16C (compiled with those flags;
// called only where cpu_has_avx2() says the CPU and the OS support them).
#include <immintrin.h>

#include "elementwise.h"

namespace tk {

namespace {

#include "x86_math.h"

inline void store8(void* p, Dtype t, size_t i, __m256 v) {
  if (t == Dtype::F32) return _mm256_storeu_ps(static_cast<float*>(p) + i, v);
  __m128i h;
  if (t == Dtype::F16) {
    h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  } else {  // bfloat16, round to nearest even; NaN stays NaN (quiet bit set)
    const __m256i b = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(b, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x40));
    r = _mm256_blendv_epi8(r, quiet, nan);
    h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(p) + i), h);
}

inline __m256 swiglu8(__m256 g, __m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
  const __m256 e = exp8(_mm256_or_ps(g, sign));  // exp(-|g|), NaN kept NaN
  const __m256 r = _mm256_div_ps(one, _mm256_add_ps(one, e));
  const __m256 negative = _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_LT_OQ);
  const __m256 sigmoid = _mm256_blendv_ps(r, _mm256_mul_ps(e, r), negative);
  return _mm256_mul_ps(_mm256_mul_ps(g, sigmoid), x);
}

}  // namespace

void swiglu_avx2(const void* gate, const void* x, void* y, Dtype type, size_t i0, size_t i1) {
  size_t i = i0;
  for (; i + 8 <= i1; i += 8) store8(y, type, i, swiglu8(load8(gate, type, i), load8(x, type, i)));
  if (i < i1) swiglu_generic(gate, x, y, type, i, i1);  // the last few
}

}  // namespace tk
