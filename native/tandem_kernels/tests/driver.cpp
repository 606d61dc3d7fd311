// The kernels and the pool without MLX or Python, for the sanitizers
// (tests/test_kernel_sanitizers.py builds it with -fsanitize=address,undefined
// and with -fsanitize=thread): random shapes against the float64 reference
// within the int16 rounding bound, every ISA this CPU runs, and the pool
// driven from two threads at once (two CPU streams) many times.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "../src/attention.h"
#include "../src/elementwise.h"
#include "../src/pool.h"
#include "../src/qmm_kernels.h"

namespace {

struct Case {
  int M, N, K, bits, group;
  std::vector<float> x, scales, biases;
  std::vector<uint32_t> w;
};

Case make(std::mt19937& rng, int M, int N, int K, int bits, int group) {
  Case c{M, N, K, bits, group, {}, {}, {}, {}};
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<uint32_t> word;
  c.x.resize(size_t(M) * K);
  for (auto& v : c.x) v = normal(rng);
  c.w.resize(size_t(N) * K * bits / 32);
  for (auto& v : c.w) v = word(rng);
  c.scales.resize(size_t(N) * K / group);
  c.biases.resize(c.scales.size());
  for (auto& v : c.scales) v = normal(rng) * 0.05f;
  for (auto& v : c.biases) v = normal(rng) * 0.1f;
  return c;
}

using Kernel = void (*)(const tk::QuantizedRows&, const tk::Weights&, float*, int, int);

// The kernel's output, the columns over the pool in chunks of 5 (`int8`:
// activations quantized for the AVX-512 VNNI kernels).
std::vector<float> run(const Case& c, Kernel kernel, bool int8 = false) {
  const int blocks = c.K / tk::BLOCK;
  std::vector<int16_t> q(size_t(c.M) * c.K);
  std::vector<int8_t> q8(int8 ? size_t(c.M) * c.K : 0);
  std::vector<float> sx(size_t(c.M) * blocks), xs(sx.size()), y(size_t(c.M) * c.N);
  std::vector<uint8_t> bad(c.M);
  tk::QuantizedRows rows{c.M, c.K, c.bits, q.data(), sx.data(), xs.data(), bad.data()};
#ifdef TK_X86
  if (int8) {
    tk::quantize_rows_int8(c.x.data(), c.M, c.K, c.bits, q8.data(), sx.data(), xs.data(),
                           bad.data());
    rows.q = nullptr, rows.q8 = q8.data();
  }
#endif
  if (!int8) {
    tk::quantize_rows(c.x.data(), c.M, c.K, c.bits, q.data(), sx.data(), xs.data(),
                      bad.data());
  }
  tk::Weights w{c.N, c.K, c.bits, c.group, c.w.data(), c.scales.data(), c.biases.data(),
                tk::ScaleType::F32};
  const int chunks = (c.N + 4) / 5;
  tk::parallel_for(chunks, [&](int i) { kernel(rows, w, y.data(), i * 5, std::min(c.N, i * 5 + 5)); });
  return y;
}

// The case's weights in the packed layout (qmm_kernels.h Weights::packed).
struct Packed {
  std::vector<uint32_t> w;
  std::vector<float> scales, biases;
  tk::Weights of(const Case& c) const {
    return {c.N, c.K, c.bits, c.group, w.data(), scales.data(), biases.data(),
            tk::ScaleType::F32, true};
  }
};

Packed pack8(const Case& c) {
  const int words = c.K * c.bits / 32, groups = c.K / c.group, J = (c.N + 7) / 8;
  Packed p{std::vector<uint32_t>(size_t(J) * words * 8), std::vector<float>(size_t(J) * groups * 8),
           std::vector<float>(size_t(J) * groups * 8)};
  for (int n = 0; n < c.N; ++n) {
    for (int t = 0; t < words; ++t) p.w[(size_t(n / 8) * words + t) * 8 + n % 8] = c.w[size_t(n) * words + t];
    for (int g = 0; g < groups; ++g) {
      p.scales[(size_t(n / 8) * groups + g) * 8 + n % 8] = c.scales[size_t(n) * groups + g];
      p.biases[(size_t(n / 8) * groups + g) * 8 + n % 8] = c.biases[size_t(n) * groups + g];
    }
  }
  return p;
}

// A packed kernel's output: activations in K's order then reordered, column
// groups over the pool one at a time.
std::vector<float> run_packed(const Case& c, Kernel kernel, bool int8 = false) {
  const Packed p = pack8(c);
  const int blocks = c.K / tk::BLOCK;
  std::vector<int16_t> q(int8 ? 0 : size_t(c.M) * c.K);
  std::vector<int8_t> q8(int8 ? size_t(c.M) * c.K : 0);
  std::vector<float> sx(size_t(c.M) * blocks), xs(sx.size()), y(size_t(c.M) * c.N);
  std::vector<uint8_t> bad(c.M);
  tk::QuantizedRows rows{c.M, c.K, c.bits, nullptr, sx.data(), xs.data(), bad.data()};
#ifdef TK_X86
  if (int8) {  // the int8 VNNI kernel: K in order, reordered for 4 bits
    tk::quantize_rows_int8(c.x.data(), c.M, c.K, 8, q8.data(), sx.data(), xs.data(), bad.data());
    if (c.bits == 4) tk::order_packed_int8(q8.data(), c.M, c.K);
    rows.q8 = q8.data();
  }
#endif
  if (!int8) {
    tk::quantize_rows(c.x.data(), c.M, c.K, 8, q.data(), sx.data(), xs.data(), bad.data());
    std::vector<int16_t> reordered = q;
    tk::order_packed(q.data(), c.M, c.K, c.bits);
#ifdef TK_X86
    if (tk::cpu_has_avx2()) {  // the AVX2 shuffle: the same order
      tk::order_packed_avx2(reordered.data(), c.M, c.K, c.bits);
      if (reordered != q) {
        std::printf("order_packed_avx2: M=%d K=%d bits=%d differs\n", c.M, c.K, c.bits);
        std::exit(1);
      }
    }
#endif
    rows.q = q.data();
  }
  const tk::Weights w = p.of(c);
  tk::parallel_for((c.N + 7) / 8, [&](int i) { kernel(rows, w, y.data(), i * 8, std::min(c.N, i * 8 + 8)); });
  return y;
}

using Dequantize = void (*)(const tk::Weights&, int, int, float*);
using DequantizePacked = void (*)(const tk::Weights&, int, int, float*, int);

// Packed panels dequantized K-major (a row 3 floats wider than the panel:
// nothing written past its columns) against the MLX layout's generic
// dequantizer, transposed.
bool check_dequantize_packed(const Case& c, DequantizePacked dequantize, const char* what) {
  const Packed p = pack8(c);
  tk::Weights w{c.N, c.K, c.bits, c.group, c.w.data(), c.scales.data(), c.biases.data(),
                tk::ScaleType::F32};
  const int n0 = c.N / 3 / 8 * 8, n1 = c.N, width = n1 - n0, ld = width + 3;
  std::vector<float> got(size_t(c.K) * ld, -7.0f), want(size_t(width) * c.K);
  dequantize(p.of(c), n0, n1, got.data(), ld);
  tk::dequantize_generic(w, n0, n1, want.data());
  for (int k = 0; k < c.K; ++k) {
    for (int i = 0; i < ld; ++i) {  // fma or not: within a rounding
      const float g = got[size_t(k) * ld + i];
      const float v = i < width ? want[size_t(i) * c.K + k] : -7.0f;
      if (std::fabs(g - v) > 1e-6 * (std::fabs(v) + 1.0)) {
        std::printf("%s packed dequantize: N=%d K=%d bits=%d at k %d column %d: %g != %g\n",
                    what, c.N, c.K, c.bits, k, n0 + i, g, v);
        return false;
      }
    }
  }
  return true;
}

bool check(const Case& c, const std::vector<float>& y, const char* what, double qmax = 32767.0) {
  std::vector<double> ref(size_t(c.M) * c.N);
  tk::Weights w{c.N, c.K, c.bits, c.group, c.w.data(), c.scales.data(), c.biases.data(),
                tk::ScaleType::F32};
  tk::qmm_reference(c.x.data(), c.M, w, ref.data());
  for (int m = 0; m < c.M; ++m) {
    for (int n = 0; n < c.N; ++n) {
      double bound = 1e-5;
      for (int k = 0; k < c.K; ++k) {
        const float* xb = c.x.data() + size_t(m) * c.K + (k / 32) * 32;
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
        const double s = c.scales[size_t(n) * (c.K / c.group) + k / c.group];
        bound += std::fabs(s) * ((1 << c.bits) - 1) * (amax / qmax / 2 + 1e-5 * std::fabs(c.x[size_t(m) * c.K + k]))
                 + 1e-5 * std::fabs(c.biases[size_t(n) * (c.K / c.group) + k / c.group] * c.x[size_t(m) * c.K + k]);
      }
      const double err = std::fabs(y[size_t(m) * c.N + n] - ref[size_t(m) * c.N + n]);
      if (!(err <= bound)) {
        std::printf("%s: M=%d N=%d K=%d bits=%d group=%d at (%d, %d): error %g > bound %g\n", what,
                    c.M, c.N, c.K, c.bits, c.group, m, n, err, bound);
        return false;
      }
    }
  }
  return true;
}

// A panel of columns dequantized, against scales * q + biases in double.
bool check_dequantize(const Case& c, Dequantize dequantize, const char* what) {
  tk::Weights w{c.N, c.K, c.bits, c.group, c.w.data(), c.scales.data(), c.biases.data(),
                tk::ScaleType::F32};
  const int n0 = c.N / 3, n1 = c.N;  // a panel starting inside the matrix
  std::vector<float> out(size_t(n1 - n0) * c.K);
  dequantize(w, n0, n1, out.data());
  std::vector<double> one(c.K);
  for (int n = n0; n < n1; ++n) {
    for (int k = 0; k < c.K; ++k) {  // the reference's weight: its product with a one-hot x
      std::vector<float> x(c.K, 0.0f);
      x[k] = 1.0f;
      tk::Weights col{1, c.K, c.bits, c.group, c.w.data() + size_t(n) * c.K * c.bits / 32,
                      c.scales.data() + size_t(n) * (c.K / c.group),
                      c.biases.data() + size_t(n) * (c.K / c.group), tk::ScaleType::F32};
      double want;
      tk::qmm_reference(x.data(), 1, col, &want);
      const double got = out[size_t(n - n0) * c.K + k];
      if (std::fabs(got - want) > 1e-6 * (std::fabs(want) + 1.0)) {
        std::printf("%s dequantize: N=%d K=%d bits=%d at (%d, %d): %g != %g\n", what, c.N, c.K,
                    c.bits, n, k, got, want);
        return false;
      }
    }
  }
  return true;
}

// The AVX2 activation quantizer against the portable one: the same integers
// and scales (both round to nearest even), sums within float rounding; a row
// holding inf or NaN flagged bad by both.
bool check_quantize(std::mt19937& rng) {
#ifdef TK_X86
  if (!tk::cpu_has_avx2()) return true;
  std::normal_distribution<float> normal;
  for (int trial = 0; trial < 20; ++trial) {
    const int M = 1 + int(rng() % 6), K = 32 * (1 + int(rng() % 40)), bits = trial % 2 ? 8 : 4;
    std::vector<float> x(size_t(M) * K);
    for (auto& v : x) v = normal(rng) * (rng() % 3 ? 1.0f : 300.0f);
    if (trial % 5 == 0) x[size_t(M - 1) * K + K / 2] = trial % 10 ? INFINITY : NAN;
    if (trial % 7 == 0) for (int k = 0; k < 32; ++k) x[k] = 0.0f;  // an all-zero block
    const int blocks = K / 32;
    std::vector<int16_t> q1(x.size()), q2(x.size());
    std::vector<float> s1(size_t(M) * blocks), s2(s1.size()), u1(s1.size()), u2(s1.size());
    std::vector<uint8_t> b1(M), b2(M);
    tk::quantize_rows(x.data(), M, K, bits, q1.data(), s1.data(), u1.data(), b1.data());
    tk::quantize_rows_avx2(x.data(), M, K, bits, q2.data(), s2.data(), u2.data(), b2.data());
    if (b1 != b2) {
      std::printf("quantize_rows_avx2: M=%d K=%d: bad rows differ\n", M, K);
      return false;
    }
    for (size_t i = 0; i < s1.size(); ++i) {
      if (b1[i / blocks]) continue;  // a bad row's outputs are NaN whatever it holds
      double mag = 0;  // the block's sum of magnitudes bounds the sums' rounding
      for (int j = 0; j < 32; ++j) mag += std::fabs(x[i * 32 + j]);
      if (s1[i] != s2[i] || std::fabs(u1[i] - u2[i]) > 1e-6 * mag) {
        std::printf("quantize_rows_avx2: block %zu: scale %g vs %g, sum %g vs %g\n", i, s1[i],
                    s2[i], u1[i], u2[i]);
        return false;
      }
    }
    for (int m = 0; m < M; ++m) {
      if (b1[m]) std::fill(q1.begin() + size_t(m) * K, q1.begin() + size_t(m + 1) * K, 0),
                 std::fill(q2.begin() + size_t(m) * K, q2.begin() + size_t(m + 1) * K, 0);
    }
    if (q1 != q2) {
      std::printf("quantize_rows_avx2: M=%d K=%d bits=%d: the integers differ\n", M, K,
                  bits);
      return false;
    }
  }
#else
  (void)rng;
#endif
  return true;
}

using Attention = void (*)(const tk::AttentionArgs&, int, int, float*);

// Attention on a cache slice (keys and values in a buffer longer than N),
// GQA, every mask kind, float32 and float16 caches, against the float64
// reference; each head's scratch sized exactly (the sanitizer sees overruns).
bool check_attention(std::mt19937& rng, Attention kernel, const char* what) {
  std::normal_distribution<float> normal;
  for (int trial = 0; trial < 12; ++trial) {
    const int B = 1 + int(rng() % 2), Hkv = 1 + int(rng() % 3), rep = 1 + int(rng() % 3);
    const int Hq = Hkv * rep, L = 1 + int(rng() % 5), N = L + int(rng() % 70);
    const int D = trial % 3 == 0 ? 20 : (trial % 3 == 1 ? 64 : 40), cap = N + 5;
    const bool half = trial % 2 == 1;
    std::vector<float> q(size_t(B) * Hq * L * D), kf(size_t(B) * Hkv * cap * D),
        vf(kf.size()), maskf(size_t(L) * N);
    for (auto* vec : {&q, &kf, &vf, &maskf}) for (auto& x : *vec) x = normal(rng);
    std::vector<uint16_t> kh(kf.size()), vh(vf.size());
    for (size_t i = 0; i < kf.size(); ++i) {  // float16 values: the float copies hold them too
      kh[i] = uint16_t(0x3c00 + (rng() % 0x800)) ^ (rng() % 2 ? 0x8000 : 0);
      vh[i] = uint16_t(0x3800 + (rng() % 0x800));
      kf[i] = tk::half_to_float(kh[i]);
      vf[i] = tk::half_to_float(vh[i]);
    }
    tk::AttentionArgs a;
    a.B = B, a.Hq = Hq, a.Hkv = Hkv, a.L = L, a.N = N, a.D = D, a.scale = 0.3f;
    a.q = {q.data(), tk::Dtype::F32, int64_t(Hq) * L * D, int64_t(L) * D, D};
    const tk::Dtype type = half ? tk::Dtype::F16 : tk::Dtype::F32;
    const void* kd = half ? static_cast<const void*>(kh.data()) : kf.data();
    const void* vd = half ? static_cast<const void*>(vh.data()) : vf.data();
    a.k = {kd, type, int64_t(Hkv) * cap * D, int64_t(cap) * D, D};
    a.v = {vd, type, int64_t(Hkv) * cap * D, int64_t(cap) * D, D};
    if (trial % 4 == 1) a.causal = true;
    if (trial % 4 == 2) a.mask = maskf.data(), a.m2 = N, a.m3 = 1;  // (L, N) broadcast
    std::vector<float> out(q.size());
    a.out = out.data();
    std::vector<float> scratch(size_t(L) * (N + D));
    kernel(a, 0, B * Hq, scratch.data());
    std::vector<double> ref(q.size());
    tk::attention_reference(a, ref.data());
    for (size_t i = 0; i < out.size(); ++i) {
      if (!(std::fabs(out[i] - ref[i]) <= 1e-4 * (std::fabs(ref[i]) + 1.0))) {
        std::printf("%s attention: B=%d Hq=%d Hkv=%d L=%d N=%d D=%d at %zu: %g != %g\n", what,
                    B, Hq, Hkv, L, N, D, i, out[i], ref[i]);
        return false;
      }
    }
  }
  return true;
}

using Swiglu = void (*)(const void*, const void*, void*, tk::Dtype, size_t, size_t);

// SwiGLU on float32 and float16 against the float64 reference: a slice
// [i0, i1) of exactly sized buffers (the sanitizer sees overruns), hostile
// values included.
bool check_swiglu(std::mt19937& rng, Swiglu kernel, const char* what) {
  std::normal_distribution<float> normal;
  const float hostile[] = {0.0f, -0.0f, 100.0f, -100.0f, 1e-40f, INFINITY, -INFINITY, NAN, 88.0f,
                           -88.0f};
  for (int trial = 0; trial < 20; ++trial) {
    const size_t n = 1 + rng() % 70, i0 = rng() % n, i1 = i0 + rng() % (n - i0 + 1);
    std::vector<float> g(n), x(n), y(n, -3.0f);
    for (size_t i = 0; i < n; ++i) {
      g[i] = trial % 3 == 0 ? hostile[rng() % 10] : normal(rng) * 6.0f;
      x[i] = normal(rng);
    }
    kernel(g.data(), x.data(), y.data(), tk::Dtype::F32, i0, i1);
    for (size_t i = 0; i < n; ++i) {
      const double want = i < i0 || i >= i1 ? -3.0 : tk::swiglu_reference(g[i], x[i]);
      const bool ok = std::isnan(want) ? std::isnan(y[i])
                      : std::isinf(want) ? y[i] == want
                      : std::fabs(y[i] - want) <= 1e-6 * std::fabs(want) + 1e-30;  // exp8 flushes e^-87.4
      if (!ok) {
        std::printf("%s swiglu: g %g x %g: %g != %g\n", what, g[i], x[i], y[i], want);
        return false;
      }
    }
    std::vector<uint16_t> gh(n), xh(n), yh(n);  // float16: the output within its rounding
    for (size_t i = 0; i < n; ++i) {
      gh[i] = uint16_t(0x3c00 + rng() % 0x800) ^ (rng() % 2 ? 0x8000 : 0);
      xh[i] = uint16_t(0x3800 + rng() % 0x800);
    }
    kernel(gh.data(), xh.data(), yh.data(), tk::Dtype::F16, 0, n);
    for (size_t i = 0; i < n; ++i) {
      const double want = tk::swiglu_reference(tk::half_to_float(gh[i]), tk::half_to_float(xh[i]));
      if (std::fabs(tk::half_to_float(yh[i]) - want) > std::fabs(want) * 1e-3 + 1e-7) {
        std::printf("%s swiglu float16: %g != %g\n", what, tk::half_to_float(yh[i]), want);
        return false;
      }
    }
  }
  return true;
}

}  // namespace

int main() {
  std::mt19937 rng(1234);
  std::vector<std::pair<Kernel, const char*>> kernels{{tk::qmm_generic, "generic"}};
  std::vector<std::pair<Dequantize, const char*>> dequantizers{
      {tk::dequantize_generic, "generic"}};
#ifdef TK_X86
  if (tk::cpu_has_avx2()) kernels.push_back({tk::qmm_avx2, "avx2"});
  if (tk::cpu_has_avx2()) dequantizers.push_back({tk::dequantize_avx2, "avx2"});
  const bool vnni = tk::cpu_has_avx512vnni();
  if (vnni) kernels.push_back({tk::qmm_vnni, "avx512vnni"});  // int16 activations
#else
  const bool vnni = false;
#endif
#ifdef TK_ARM64
  kernels.push_back({tk::qmm_neon, "neon"});
  dequantizers.push_back({tk::dequantize_neon, "neon"});
#endif
  std::vector<std::pair<Kernel, const char*>> packed{{tk::qmm_packed_generic, "packed generic"}};
  std::vector<std::pair<DequantizePacked, const char*>> packed_dequantizers{
      {tk::dequantize_packed_generic, "generic"}};
#ifdef TK_X86
  if (tk::cpu_has_avx2()) packed.push_back({tk::qmm_packed_avx2, "packed avx2"});
  if (tk::cpu_has_avx2()) packed_dequantizers.push_back({tk::dequantize_packed_avx2, "avx2"});
  if (vnni) packed.push_back({tk::qmm_packed_vnni, "packed avx512vnni"});
#endif
  tk::set_threads(3);
  const int groups[] = {32, 64, 128};
  int cases = 0;
  for (int trial = 0; trial < 30; ++trial) {
    const int bits = trial % 2 ? 8 : 4, group = groups[trial % 3];
    const int M = 1 + int(rng() % 20), N = 1 + int(rng() % 40), K = group * (1 + int(rng() % 4));
    const Case c = make(rng, M, N, K, bits, group);
    for (auto& [kernel, name] : kernels) {
      if (!check(c, run(c, kernel), name)) return 1;
      ++cases;
    }
#ifdef TK_X86
    if (vnni) {
      if (!check(c, run(c, tk::qmm_vnni, true), "avx512vnni-int8", tk::QMAX8)) return 1;
      if (!check(c, run_packed(c, tk::qmm_packed_vnni, true), "packed avx512vnni-int8",
                 tk::QMAX8)) {
        return 1;
      }
      cases += 2;
    }
#endif
    for (auto& [kernel, name] : packed) {
      if (!check(c, run_packed(c, kernel), name)) return 1;
      ++cases;
    }
    if (trial < 6) {
      for (auto& [dequantize, name] : dequantizers) {
        if (!check_dequantize(c, dequantize, name)) return 1;
      }
    }
    for (auto& [dequantize, name] : packed_dequantizers) {
      if (!check_dequantize_packed(c, dequantize, name)) return 1;
    }
  }
  std::vector<std::pair<Attention, const char*>> attentions{{tk::attention_generic, "generic"}};
#ifdef TK_X86
  if (tk::cpu_has_avx2()) attentions.push_back({tk::attention_avx2, "avx2"});
#endif
  if (!check_quantize(rng)) return 1;
  std::vector<std::pair<Swiglu, const char*>> swiglus{{tk::swiglu_generic, "generic"}};
#ifdef TK_X86
  if (tk::cpu_has_avx2()) swiglus.push_back({tk::swiglu_avx2, "avx2"});
#endif
  for (auto& [swiglu, name] : swiglus) {
    if (!check_swiglu(rng, swiglu, name)) return 1;
  }
  for (auto& [attention, name] : attentions) {
    if (!check_attention(rng, attention, name)) return 1;
  }
  // Two streams calling into the pool at once, many small jobs each.
  const Case c = make(rng, 3, 97, 256, 4, 64);
  const std::vector<float> want = run(c, kernels.back().first);
  bool same = true;
  auto hammer = [&] {
    for (int i = 0; i < 200; ++i) {
      if (run(c, kernels.back().first) != want) same = false;
    }
  };
  std::thread other(hammer);
  hammer();
  other.join();
  if (!same) {
    std::printf("the pool changed a result\n");
    return 1;
  }
  std::printf("ok: %d cases, %zu kernels (%s%s) and %zu packed, dequantized panels, quantized activations, attention, swiglu, 400 pooled runs from two threads\n", cases, kernels.size() + vnni,
              kernels.back().second, vnni ? ", avx512vnni-int8" : "", packed.size());
  return 0;
}
