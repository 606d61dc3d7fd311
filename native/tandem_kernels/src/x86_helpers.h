// Helpers of the x86 kernel files (kernels_avx2.cpp, kernels_vnni.cpp).
// Included inside `namespace tk { namespace { ... } }` after <immintrin.h>
// and qmm_kernels.h, so each file keeps its own copy compiled with its flags.

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

// Is every value of the row finite? (x - x is 0 only where x is finite.)
inline bool row_finite(const float* row, int K) {
  __m256 finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (int i = 0; i < K; i += 8) {
    const __m256 v = _mm256_loadu_ps(row + i);
    finite = _mm256_and_ps(finite, _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(),
                                                 _CMP_EQ_OQ));
  }
  return _mm256_movemask_ps(finite) == 0xff;
}

// One block of 32 activations: its largest magnitude and its float sum.
inline void block_stats(const float* xb, __m256 v[4], float& amax, float& sum) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps(), s = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(xb + 8 * i);
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
    s = _mm256_add_ps(s, v[i]);
  }
  __m128 a = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  a = _mm_max_ps(a, _mm_movehl_ps(a, a));
  a = _mm_max_ss(a, _mm_shuffle_ps(a, a, 1));
  amax = _mm_cvtss_f32(a);
  sum = hsum(s);
}

// A block's 32 activations rounded to integers in [-qmax, qmax] (to nearest
// even, as the generic quantizer), in position order.
inline void block_ints(const __m256 v[4], float inv, int qmax, int32_t* ints) {
  const __m256 iv = _mm256_set1_ps(inv);
  const __m256i lo = _mm256_set1_epi32(-qmax), hi = _mm256_set1_epi32(qmax);
  for (int i = 0; i < 4; ++i) {
    const __m256i r = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], iv));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(ints + 8 * i),
                        _mm256_min_epi32(_mm256_max_epi32(r, lo), hi));
  }
}
