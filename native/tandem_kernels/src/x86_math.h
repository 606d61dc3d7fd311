// Vector math and loads of the x86 kernel files compiled with AVX2, FMA and
// F16C (attention_avx2.cpp, elementwise_avx2.cpp). Included inside
// `namespace tk { namespace { ... } }` after <immintrin.h>, so each file
// keeps its own copy compiled with its flags.

// exp(x) for x <= 0 (Cephes' expf, as in avx_mathfun): relative error ~1e-7;
// below -87.3 (masked keys, -inf) exactly 0.
inline __m256 exp8(__m256 x) {
  const __m256 low = _mm256_set1_ps(-87.33654f);
  const __m256 tiny = _mm256_cmp_ps(x, low, _CMP_LT_OQ);
  x = _mm256_max_ps(x, low);
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500E-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(tiny, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

// 8 values of `t` from element d of x, as floats.
inline __m256 load8(const void* x, Dtype t, size_t d) {
  if (t == Dtype::F32) return _mm256_loadu_ps(static_cast<const float*>(x) + d);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(
      static_cast<const uint16_t*>(x) + d));
  if (t == Dtype::F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
