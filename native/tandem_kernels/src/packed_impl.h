// The x86 kernels on packed weights (Weights::packed: 8 columns' words
// interleaved), shared by kernels_avx2.cpp and kernels_vnni.cpp. Included
// inside `namespace tk { namespace { ... } }` after x86_helpers.h, with the
// file's activation policies, each
//   struct P {
//     template <int BITS> static constexpr int parts();  // extractions a word
//     template <int BITS> static __m256i part(__m256i raw, int s);
//     static int32_t act(const QuantizedRows& x, size_t at);  // 4 bytes of
//         // activations from element `at` of x.q (int16 pairs) or x.q8 (int8)
//     static __m256i dot(__m256i acc, __m256i w, __m256i x);
//   };
//
// One vector load gives a word of each of 8 columns (lane c: column 8j + c);
// extraction s of it (shifted and masked) holds each column's next weights,
// which meet the row's matching activations broadcast to every lane: int16
// pairs (s, s + E/2) with vpmaddwd or vpdpwssd, or int8 quads with vpdpbusd.
// A block's 8 sums come out in one vector, scaled by 8 columns' scales at
// once: no horizontal sum, no per-column epilogue.

// int16 activations (qmm_kernels.h packed_source): a 16-bit half of a word
// shifted by bits x s and masked holds the pair (s, s + E/2).
template <class Acc>
struct Int16Packed {
  template <int BITS>
  static constexpr int parts() { return 16 / BITS; }
  template <int BITS>
  static __m256i part(__m256i raw, int s) {
    return _mm256_and_si256(_mm256_srli_epi16(raw, BITS * s), _mm256_set1_epi16((1 << BITS) - 1));
  }
  static constexpr int PER = 2;  // activations a part
  static int32_t act(const QuantizedRows& x, size_t at) {
    int32_t pair;
    __builtin_memcpy(&pair, x.q + at, 4);
    return pair;
  }
  static __m256i dot(__m256i acc, __m256i w, __m256i x) { return Acc::dot(acc, w, x); }
};

// 8 scales or biases from `data` at index i (8 consecutive values).
inline __m256 scales8(const void* data, ScaleType type, size_t i) {
  if (type == ScaleType::F16) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(data) + i)));
  }
  if (type == ScaleType::BF16) {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(data) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  return _mm256_loadu_ps(static_cast<const float*>(data) + i);
}

// How far ahead of its reads each column group's stream is prefetched: the
// hardware's prefetchers alone left one row at ~24 G multiply-adds/s a
// thread from memory (several streams at once: CG groups' weights, scales
// and biases); 384 bytes ahead, ~40 (256 to 1024 measured within 10%).
constexpr int PREFETCH_BYTES = 384;

// The scales' (or biases') stream of a column group, prefetched ahead in
// proportion (a 32-block's 8 scales are 16 or 32 bytes to its 128 of weights).
inline void prefetch_ahead(const void* data, ScaleType type, size_t i) {
  const size_t size = type == ScaleType::F32 ? 4 : 2;
  _mm_prefetch(static_cast<const char*>(data) + i * size + PREFETCH_BYTES / 4, _MM_HINT_T0);
}

// Lanes [0, count) of v to out (the last column group of an N not a multiple of 8).
inline void store_first(float* out, __m256 v, int count) {
  if (count >= 8) return _mm256_storeu_ps(out, v);
  alignas(32) float all[8];
  _mm256_store_ps(all, v);
  for (int i = 0; i < count; ++i) out[i] = all[i];
}

// R rows from m0 times column groups [j0, j1), CG groups a pass: R x CG x 2
// independent integer chains a block (the latency of one would bind).
template <class P, int R, int CG, int BITS>
void packed_rows(const QuantizedRows& x, const Weights& w, float* y, int m0, int j0, int j1) {
  constexpr int E = 32 / BITS, PARTS = P::template parts<BITS>(), WORDS = BLOCK / E;
  const int blocks = w.K / BLOCK, groups = w.K / w.group, per = w.group / BLOCK;
  const size_t words = size_t(w.K) / E;
  for (int j = j0; j + CG <= j1; j += CG) {
    __m256 acc[R][CG], rest[R][CG];
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < CG; ++c) acc[r][c] = rest[r][c] = _mm256_setzero_ps();
    }
    for (int g = 0; g < groups; ++g) {
      __m256 sw[CG], bw[CG];
      for (int c = 0; c < CG; ++c) {
        const size_t at = (size_t(j + c) * groups + g) * 8;
        prefetch_ahead(w.scales, w.type, at);
        prefetch_ahead(w.biases, w.type, at);
        sw[c] = scales8(w.scales, w.type, at);
        bw[c] = scales8(w.biases, w.type, at);
      }
      for (int b = g * per; b < (g + 1) * per; ++b) {
        __m256i sum[R][CG][2];
        for (int r = 0; r < R; ++r) {
          for (int c = 0; c < CG; ++c) sum[r][c][0] = sum[r][c][1] = _mm256_setzero_si256();
        }
        for (int v = 0; v < WORDS; ++v) {
          __m256i raw[CG];
          for (int c = 0; c < CG; ++c) {
            const uint32_t* at = w.w + ((j + c) * words + size_t(b) * WORDS + v) * 8;
            if (v % 2 == 0) {  // a 64-byte line every two vectors
              _mm_prefetch(reinterpret_cast<const char*>(at) + PREFETCH_BYTES, _MM_HINT_T0);
            }
            raw[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
          }
          for (int s = 0; s < PARTS; ++s) {
            __m256i part[CG];
            for (int c = 0; c < CG; ++c) part[c] = P::template part<BITS>(raw[c], s);
            for (int r = 0; r < R; ++r) {
              const __m256i xp = _mm256_set1_epi32(
                  P::act(x, size_t(m0 + r) * w.K + b * BLOCK + v * E + P::PER * s));
              for (int c = 0; c < CG; ++c) {
                sum[r][c][(v * PARTS + s) & 1] = P::dot(sum[r][c][(v * PARTS + s) & 1], part[c], xp);
              }
            }
          }
        }
        for (int r = 0; r < R; ++r) {
          const size_t at = size_t(m0 + r) * blocks + b;
          const __m256 sx = _mm256_set1_ps(x.scale[at]), xs = _mm256_set1_ps(x.sum[at]);
          for (int c = 0; c < CG; ++c) {
            const __m256i both = _mm256_add_epi32(sum[r][c][0], sum[r][c][1]);
            acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(both), _mm256_mul_ps(sx, sw[c]),
                                        acc[r][c]);
            rest[r][c] = _mm256_fmadd_ps(bw[c], xs, rest[r][c]);
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < CG; ++c) {
        const int n = (j + c) * 8;
        const __m256 out = x.bad[m0 + r] ? _mm256_set1_ps(__builtin_nanf(""))
                                         : _mm256_add_ps(acc[r][c], rest[r][c]);
        store_first(y + size_t(m0 + r) * w.N + n, out, w.N - n);
      }
    }
  }
  if constexpr (CG > 1) {
    const int done = j0 + (j1 - j0) / CG * CG;
    if (done < j1) packed_rows<P, R, 1, BITS>(x, w, y, m0, done, j1);
  }
}

// Rows 4 at a time x 2 column groups (measured best at 4 and 16 rows), then
// 2 x 2, one row alone: 4 groups a pass.
template <class P, int BITS>
void packed_all(const QuantizedRows& x, const Weights& w, float* y, int j0, int j1) {
  int m = 0;
  for (; m + 4 <= x.M; m += 4) packed_rows<P, 4, 2, BITS>(x, w, y, m, j0, j1);
  for (; m + 2 <= x.M; m += 2) packed_rows<P, 2, 2, BITS>(x, w, y, m, j0, j1);
  if (m < x.M) packed_rows<P, 1, 4, BITS>(x, w, y, m, j0, j1);
}

// Columns [n0, n1) of packed weights (n0 a multiple of 8).
template <class P>
void packed_qmm(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1) {
  const int j0 = n0 / 8, j1 = (n1 + 7) / 8;
  if (w.bits == 4) {
    packed_all<P, 4>(x, w, y, j0, j1);
  } else {
    packed_all<P, 8>(x, w, y, j0, j1);
  }
}

// Columns [n0, n1) of packed weights dequantized K-major, out[k * ld + n - n0]
// (sgemm takes the panel untransposed): a column group's word, shifted and
// masked, gives 8 columns' values at one k, scaled by their 8 scales at once.
template <int BITS>
void packed_dequantize_bits(const Weights& w, int n0, int n1, float* out, int ld) {
  constexpr int E = 32 / BITS;
  const int groups = w.K / w.group;
  const size_t words = size_t(w.K) / E;
  const __m256i mask = _mm256_set1_epi32((1 << BITS) - 1);
  // A group's rows of k across every column group, then the next group's:
  // each output line is completed while it is in cache (column group by
  // column group, a 4 MiB panel's rows were evicted before their neighbours
  // came: 10% slower prefill than MLX's layout).
  for (int g = 0; g < groups; ++g) {
    for (int j = n0 / 8; j * 8 < n1; ++j) {
      const int count = n1 - j * 8;  // 8 or more: a whole group
      float* cols = out + (j * 8 - n0);
      const __m256 sw = scales8(w.scales, w.type, (size_t(j) * groups + g) * 8);
      const __m256 bw = scales8(w.biases, w.type, (size_t(j) * groups + g) * 8);
      for (int t = g * w.group / E; t < (g + 1) * w.group / E; ++t) {
        const __m256i v =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.w + (size_t(j) * words + t) * 8));
        for (int e = 0; e < E; ++e) {
          const __m256 q = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, BITS * e), mask));
          store_first(cols + size_t(t * E + e) * ld, _mm256_fmadd_ps(sw, q, bw), count);
        }
      }
    }
  }
}

inline void packed_dequantize(const Weights& w, int n0, int n1, float* out, int ld) {
  if (w.bits == 4) {
    packed_dequantize_bits<4>(w, n0, n1, out, ld);
  } else {
    packed_dequantize_bits<8>(w, n0, n1, out, ld);
  }
}
