// The portable attention kernel (any CPU) and the float64 reference.
#include <cmath>
#include <cstring>

#include "attention.h"
#include "qmm_kernels.h"

namespace tk {

namespace {

#include "dtype_load.h"

inline float row_dot(const float* q, const void* k, Dtype t, int D) {
  float acc[4] = {0, 0, 0, 0};
  int d = 0;
  for (; d + 4 <= D; d += 4) {
    for (int i = 0; i < 4; ++i) acc[i] += q[d + i] * load1(k, t, d + i);
  }
  float s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (; d < D; ++d) s += q[d] * load1(k, t, d);
  return s;
}

inline void row_axpy(float p, const void* v, Dtype t, int D, float* o) {
  for (int d = 0; d < D; ++d) o[d] += p * load1(v, t, d);
}

inline void row_load(const void* x, Dtype t, int D, float* o) {
  for (int d = 0; d < D; ++d) o[d] = load1(x, t, d);
}

inline float exp_shifted(float* s, int n, float m) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) {
    s[i] = std::exp(s[i] - m);
    sum += s[i];
  }
  return sum;
}

#include "attention_impl.h"

}  // namespace

void attention_generic(const AttentionArgs& a, int h0, int h1, float* scratch) {
  for (int bh = h0; bh < h1; ++bh) one_head(a, bh, scratch);
}

void attention_reference(const AttentionArgs& a, double* out) {
  const int L = a.L, N = a.N, D = a.D;
  for (int bh = 0; bh < a.B * a.Hq; ++bh) {
    const int b = bh / a.Hq, h = bh % a.Hq, kvh = h / (a.Hq / a.Hkv);
    for (int l = 0; l < L; ++l) {
      double* o = out + (size_t(bh) * L + l) * D;
      const void* q = row_at(a.q, b, h, l);
      double m = -INFINITY, sum = 0.0;
      bool bad = false;
      double* s = new double[N > 0 ? N : 1];
      for (int n = 0; n < N; ++n) {
        double dot = 0.0;
        const void* k = row_at(a.k, b, kvh, n);
        for (int d = 0; d < D; ++d) dot += double(load1(q, a.q.type, d)) * load1(k, a.k.type, d);
        s[n] = (a.causal && n > N - L + l) ? -INFINITY
               : dot * a.scale + (a.mask ? mask_at(a, b, h, l, n) : 0.0);
        bad |= std::isnan(s[n]);
        if (s[n] > m) m = s[n];
      }
      if (bad || std::isinf(m) || N == 0) {
        for (int d = 0; d < D; ++d) o[d] = NAN;
        delete[] s;
        continue;
      }
      for (int d = 0; d < D; ++d) o[d] = 0.0;
      for (int n = 0; n < N; ++n) {
        const double p = std::exp(s[n] - m);
        sum += p;
        const void* v = row_at(a.v, b, kvh, n);
        for (int d = 0; d < D; ++d) o[d] += p * load1(v, a.v.type, d);
      }
      for (int d = 0; d < D; ++d) o[d] /= sum;
      delete[] s;
    }
  }
}

}  // namespace tk
