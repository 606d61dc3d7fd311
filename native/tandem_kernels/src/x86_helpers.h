// Helpers of the x86 kernel files (kernels_avx2.cpp, kernels_vnni.cpp): the
// row blocking and scaling they share, each file giving its block products.
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

// M rows of K activations quantized per 32-block to integers of type T in
// [-qmax, qmax] (s = amax / qmax), laid out for `bits` (4: each block's 16
// even positions, then its 16 odd ones; else in order); a row holding NaN or
// inf flagged bad, its integers, scales and sums 0.
template <class T>
void quantize_rows_as(const float* x, int M, int K, int bits, float qmax, T* q, float* scale,
                      float* sum, uint8_t* bad) {
  const int blocks = K / BLOCK;
  for (int m = 0; m < M; ++m) {
    const float* row = x + size_t(m) * K;
    bad[m] = !row_finite(row, K);
    T* qr = q + size_t(m) * K;
    if (bad[m]) {
      for (int i = 0; i < K; ++i) qr[i] = 0;
      for (int b = 0; b < blocks; ++b) scale[size_t(m) * blocks + b] = sum[size_t(m) * blocks + b] = 0.0f;
      continue;
    }
    for (int b = 0; b < blocks; ++b) {
      __m256 v[4];
      float amax, s;
      block_stats(row + b * BLOCK, v, amax, s);
      const float d = amax / qmax;
      const size_t at = size_t(m) * blocks + b;
      scale[at] = d;
      sum[at] = s;
      alignas(32) int32_t ints[BLOCK];
      block_ints(v, d > 0.0f ? 1.0f / d : 0.0f, int(qmax), ints);
      T* qb = qr + b * BLOCK;
      if (bits == 4) {  // the 16 even positions, then the 16 odd ones
        for (int j = 0; j < 16; ++j) {
          qb[j] = T(ints[2 * j]);
          qb[16 + j] = T(ints[2 * j + 1]);
        }
      } else {
        for (int j = 0; j < BLOCK; ++j) qb[j] = T(ints[j]);
      }
    }
  }
}

// 32 weights of a block as two vectors of 16 int16: for 4 bits (16 bytes)
// the low nibbles (even k) then the high nibbles (odd k), the order
// quantize_rows gives activations; for 8 bits (32 bytes) k in order.
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

// The int16 activations' block: two vectors of 16 (QuantizedRows::q).
struct Int16Block {
  __m256i first, second;
  static Int16Block of(const QuantizedRows& x, int m, int b) {
    const int16_t* q = x.q + size_t(m) * x.K + b * BLOCK;
    return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)),
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 16))};
  }
};

// The weights' block unpacked to int16, for an Int16Block.
struct Int16Weights {
  __m256i first, second;
  template <int BITS>
  static Int16Weights of(const uint8_t* p) {
    Int16Weights w;
    unpack16<BITS>(p, w.first, w.second);
    return w;
  }
};

// R rows from m0, columns [n0, n1), C columns at a time: each weight block
// is unpacked once for R rows, each activation block loaded once for C
// columns; R x C accumulators, independent chains (one row alone was bound
// by the latency of a single accumulator's fma chain). `Dot` says how a
// block is read and multiplied: Dot::Weights::of<BITS>(bytes),
// Dot::Block::of(x, row, block), Dot::sum(weights, block) -> the block's 32
// products summed exactly in int32 (8 lanes); here they are scaled.
template <class Dot, int R, int C, int BITS>
void rows_of(const QuantizedRows& x, const Weights& w, float* y, int m0, int n0, int n1) {
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
        typename Dot::Weights wv[C];
        for (int c = 0; c < C; ++c) {
          wv[c] = Dot::Weights::template of<BITS>(wr[c] + b * BLOCK * BITS / 8);
        }
        for (int r = 0; r < R; ++r) {
          const size_t at = size_t(m0 + r) * blocks + b;
          const typename Dot::Block xb = Dot::Block::of(x, m0 + r, b);
          const float sx = x.scale[at], xs = x.sum[at];
          for (int c = 0; c < C; ++c) {
            acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Dot::sum(wv[c], xb)),
                                        _mm256_set1_ps(sx * sw[c]), acc[r][c]);
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
    if (n < n1) rows_of<Dot, R, 1, BITS>(x, w, y, m0, n, n1);
  }
}
