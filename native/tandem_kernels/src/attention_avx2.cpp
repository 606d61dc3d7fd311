// The attention kernel with AVX2/FMA/F16C (compiled with those flags; called
// only where cpu_has_avx2() says the CPU and the OS support them).
#include <immintrin.h>

#include "attention.h"
#include "qmm_kernels.h"  // half_to_float (portable code: dtype_load.h)

namespace tk {

namespace {

#include "x86_math.h"

#include "dtype_load.h"

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_hadd_ps(s, s);
  s = _mm_hadd_ps(s, s);
  return _mm_cvtss_f32(s);
}

inline float row_dot(const float* q, const void* k, Dtype t, int D) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int d = 0;
  for (; d + 16 <= D; d += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8(k, t, d), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), load8(k, t, d + 8), a1);
  }
  for (; d + 8 <= D; d += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8(k, t, d), a0);
  float s = hsum(_mm256_add_ps(a0, a1));
  for (; d < D; ++d) s += q[d] * load1(k, t, d);
  return s;
}

inline void row_axpy(float p, const void* v, Dtype t, int D, float* o) {
  const __m256 pv = _mm256_set1_ps(p);
  int d = 0;
  for (; d + 8 <= D; d += 8) {
    _mm256_storeu_ps(o + d, _mm256_fmadd_ps(pv, load8(v, t, d), _mm256_loadu_ps(o + d)));
  }
  for (; d < D; ++d) o[d] += p * load1(v, t, d);
}

inline void row_load(const void* x, Dtype t, int D, float* o) {
  int d = 0;
  for (; d + 8 <= D; d += 8) _mm256_storeu_ps(o + d, load8(x, t, d));
  for (; d < D; ++d) o[d] = load1(x, t, d);
}

inline float exp_shifted(float* s, int n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), mv));
    _mm256_storeu_ps(s + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = hsum(acc);
  if (i < n) {  // the tail through the same approximation
    float tail[8];
    for (int j = 0; j < 8; ++j) tail[j] = i + j < n ? s[i + j] - m : -__builtin_inff();
    _mm256_storeu_ps(tail, exp8(_mm256_loadu_ps(tail)));
    for (int j = 0; i + j < n; ++j) {
      s[i + j] = tail[j];
      sum += tail[j];
    }
  }
  return sum;
}

#include "attention_impl.h"

}  // namespace

void attention_avx2(const AttentionArgs& a, int h0, int h1, float* scratch) {
  for (int bh = h0; bh < h1; ++bh) one_head(a, bh, scratch);
}

}  // namespace tk
