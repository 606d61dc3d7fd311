// The attention body shared by attention_generic.cpp and attention_avx2.cpp.
// Included inside `namespace tk { namespace { ... } }` after the file's own
//   float row_dot(const float* q, const void* k, Dtype t, int D);
//   void row_axpy(float p, const void* v, Dtype t, int D, float* o);
//   void row_load(const void* x, Dtype t, int D, float* o);
//   float exp_shifted(float* s, int n, float m);  // s[i] = exp(s[i] - m); their sum
// No library templates here: a copy compiled with AVX2 flags must never be
// the one the linker keeps for code that runs on any CPU.

inline const char* row_at(const Tensor4& t, int64_t i0, int64_t i1, int64_t i2) {
  const int64_t size = t.type == Dtype::F32 ? 4 : 2;
  return static_cast<const char*>(t.data) + (i0 * t.s0 + i1 * t.s1 + i2 * t.s2) * size;
}

inline float mask_at(const AttentionArgs& a, int b, int h, int l, int n) {
  const int64_t at = b * a.m0 + h * a.m1 + l * a.m2 + n * a.m3;
  if (a.mask_bool) {
    return static_cast<const uint8_t*>(a.mask)[at] ? 0.0f : -__builtin_inff();
  }
  return static_cast<const float*>(a.mask)[at];
}

// One flattened query head bh = b * Hq + h, all L rows; scratch: L * (N + D) floats.
inline void one_head(const AttentionArgs& a, int bh, float* scratch) {
  const int b = bh / a.Hq, h = bh % a.Hq, kvh = h / (a.Hq / a.Hkv);
  const int L = a.L, N = a.N, D = a.D;
  float* scores = scratch;          // L x N
  float* q = scratch + size_t(L) * N;  // L x D, as float32
  for (int l = 0; l < L; ++l) row_load(row_at(a.q, b, h, l), a.q.type, D, q + size_t(l) * D);
  const float ninf = -__builtin_inff();
  for (int n = 0; n < N; ++n) {
    const void* k = row_at(a.k, b, kvh, n);
    for (int l = 0; l < L; ++l) {
      float s;
      if (a.causal && n > N - L + l) {
        s = ninf;
      } else {
        s = row_dot(q + size_t(l) * D, k, a.k.type, D) * a.scale;
        if (a.mask) s += mask_at(a, b, h, l, n);
      }
      scores[size_t(l) * N + n] = s;
    }
  }
  float* out = a.out + size_t(bh) * L * D;
  for (int l = 0; l < L; ++l) {
    float* s = scores + size_t(l) * N;
    float m = ninf;
    bool bad = false;
    for (int n = 0; n < N; ++n) {
      bad |= s[n] != s[n];
      m = s[n] > m ? s[n] : m;
    }
    float* o = out + size_t(l) * D;
    if (bad || m == ninf || m == -ninf || N == 0) {  // NaN, +inf, or nothing seen
      for (int d = 0; d < D; ++d) o[d] = __builtin_nanf("");
      continue;
    }
    const float sum = exp_shifted(s, N, m);
    for (int d = 0; d < D; ++d) o[d] = 0.0f;
    // Weighted values: a few rows at a time would reuse v from cache; one
    // row is read once per query row, in order.
    for (int n = 0; n < N; ++n) {
      if (s[n] != 0.0f) row_axpy(s[n], row_at(a.v, b, kvh, n), a.v.type, D, o);
    }
    const float inv = 1.0f / sum;
    for (int d = 0; d < D; ++d) o[d] *= inv;
  }
}
