// The portable kernels: activation quantization, the scalar matmul (any
// CPU) and the float64 reference. Compiled without ISA flags.
#include <cmath>
#include <cstring>

#include "qmm_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace tk {

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

namespace {

float scalar_at(const void* data, ScaleType type, size_t i) {
  switch (type) {
    case ScaleType::F16:
      return half_to_float(static_cast<const uint16_t*>(data)[i]);
    case ScaleType::BF16: {
      uint32_t bits = uint32_t(static_cast<const uint16_t*>(data)[i]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    default:
      return static_cast<const float*>(data)[i];
  }
}

// Where block position j reads its activation from: 4-bit weights unpack as
// the 16 even positions, then the 16 odd ones (low nibbles, then high).
inline int source(int j, int bits) {
  return bits == 4 ? (j < 16 ? 2 * j : 2 * (j - 16) + 1) : j;
}

int weight_at(const uint8_t* row, int k, int bits) {
  return bits == 4 ? (row[k / 2] >> (4 * (k & 1))) & 0xf : row[k];
}

// Weight k of column n and the index of its group's scale, either layout.
int weight_of(const Weights& w, int n, int k) {
  if (!w.packed) {
    const size_t row_bytes = size_t(w.K) * w.bits / 8;
    return weight_at(reinterpret_cast<const uint8_t*>(w.w) + n * row_bytes, k, w.bits);
  }
  const int E = 32 / w.bits, words = w.K / E;
  const uint32_t word = w.w[(size_t(n / 8) * words + k / E) * 8 + n % 8];
  return (word >> (w.bits * (k % E))) & ((1u << w.bits) - 1);
}

size_t scale_index(const Weights& w, int n, int g) {
  const size_t groups = w.K / w.group;
  return w.packed ? (size_t(n / 8) * groups + g) * 8 + n % 8 : size_t(n) * groups + g;
}

}  // namespace

void quantize_rows(const float* x, int M, int K, int bits, int16_t* q, float* scale,
                   float* sum, uint8_t* bad) {
  const int blocks = K / BLOCK;
  for (int m = 0; m < M; ++m) {
    const float* row = x + size_t(m) * K;
    bad[m] = 0;
    for (int b = 0; b < blocks; ++b) {
      const float* xb = row + b * BLOCK;
      float amax = 0.0f, s = 0.0f;
      for (int j = 0; j < BLOCK; ++j) {
        if (!std::isfinite(xb[j])) bad[m] = 1;
        amax = std::fmax(amax, std::fabs(xb[j]));
        s += xb[j];
      }
      const size_t at = size_t(m) * blocks + b;
      const float d = amax / QMAX;
      const float inv = d > 0.0f ? 1.0f / d : 0.0f;
      int16_t* qb = q + size_t(m) * K + b * BLOCK;
      for (int j = 0; j < BLOCK; ++j) {
        float v = std::nearbyint(xb[source(j, bits)] * inv);
        v = std::fmin(std::fmax(v, -QMAX), QMAX);
        qb[j] = bad[m] ? 0 : static_cast<int16_t>(v);
      }
      scale[at] = bad[m] ? 0.0f : d;
      sum[at] = bad[m] ? 0.0f : s;
    }
  }
}

void order_packed(int16_t* q, int M, int K, int bits) {
  int16_t block[BLOCK];
  for (size_t b = 0; b < size_t(M) * K / BLOCK; ++b) {
    int16_t* qb = q + b * BLOCK;
    for (int i = 0; i < BLOCK; ++i) block[i] = qb[packed_source(i, bits)];
    std::memcpy(qb, block, sizeof(block));
  }
}

// The scalar kernel on packed weights: the same integers as the x86 ones.
void qmm_packed_generic(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1) {
  const int blocks = w.K / BLOCK, groups = w.K / w.group, per = w.group / BLOCK;
  for (int n = n0; n < n1; ++n) {
    for (int m = 0; m < x.M; ++m) {
      if (x.bad[m]) {
        y[size_t(m) * w.N + n] = NAN;
        continue;
      }
      const int16_t* q = x.q + size_t(m) * w.K;
      float acc = 0.0f, rest = 0.0f;
      for (int g = 0; g < groups; ++g) {
        const float sw = scalar_at(w.scales, w.type, scale_index(w, n, g));
        const float bw = scalar_at(w.biases, w.type, scale_index(w, n, g));
        for (int b = g * per; b < (g + 1) * per; ++b) {
          int32_t dot = 0;
          for (int i = 0; i < BLOCK; ++i) {
            dot += int32_t(q[b * BLOCK + i]) * weight_of(w, n, b * BLOCK + packed_source(i, w.bits));
          }
          const size_t at = size_t(m) * blocks + b;
          acc += float(dot) * (x.scale[at] * sw);
          rest += bw * x.sum[at];
        }
      }
      y[size_t(m) * w.N + n] = acc + rest;
    }
  }
}

void dequantize_packed_generic(const Weights& w, int n0, int n1, float* out, int ld) {
  const int groups = w.K / w.group;
  for (int n = n0; n < n1; ++n) {
    for (int g = 0; g < groups; ++g) {
      const float sw = scalar_at(w.scales, w.type, scale_index(w, n, g));
      const float bw = scalar_at(w.biases, w.type, scale_index(w, n, g));
      for (int k = g * w.group; k < (g + 1) * w.group; ++k) {
        out[size_t(k) * ld + n - n0] = sw * float(weight_of(w, n, k)) + bw;
      }
    }
  }
}

void qmm_generic(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1) {
  const int blocks = w.K / BLOCK, groups = w.K / w.group, per = w.group / BLOCK;
  const size_t row_bytes = size_t(w.K) * w.bits / 8;
  for (int n = n0; n < n1; ++n) {
    const uint8_t* wr = reinterpret_cast<const uint8_t*>(w.w) + n * row_bytes;
    for (int m = 0; m < x.M; ++m) {
      if (x.bad[m]) {
        y[size_t(m) * w.N + n] = NAN;
        continue;
      }
      const int16_t* q = x.q + size_t(m) * w.K;
      const float* sx = x.scale + size_t(m) * blocks;
      const float* xs = x.sum + size_t(m) * blocks;
      float acc = 0.0f;
      for (int g = 0; g < groups; ++g) {
        const float sw = scalar_at(w.scales, w.type, size_t(n) * groups + g);
        const float bw = scalar_at(w.biases, w.type, size_t(n) * groups + g);
        float block_sum = 0.0f;
        for (int b = g * per; b < (g + 1) * per; ++b) {
          int32_t dot = 0;
          for (int j = 0; j < BLOCK; ++j) {
            dot += int32_t(q[b * BLOCK + j]) * weight_at(wr, b * BLOCK + source(j, w.bits), w.bits);
          }
          acc += float(dot) * (sx[b] * sw);
          block_sum += xs[b];
        }
        acc += bw * block_sum;
      }
      y[size_t(m) * w.N + n] = acc;
    }
  }
}

void dequantize_generic(const Weights& w, int n0, int n1, float* out) {
  const int groups = w.K / w.group;
  const size_t row_bytes = size_t(w.K) * w.bits / 8;
  for (int n = n0; n < n1; ++n) {
    const uint8_t* wr = reinterpret_cast<const uint8_t*>(w.w) + n * row_bytes;
    float* o = out + size_t(n - n0) * w.K;
    for (int g = 0; g < groups; ++g) {
      const float sw = scalar_at(w.scales, w.type, size_t(n) * groups + g);
      const float bw = scalar_at(w.biases, w.type, size_t(n) * groups + g);
      for (int k = g * w.group; k < (g + 1) * w.group; ++k) {
        o[k] = sw * float(weight_at(wr, k, w.bits)) + bw;
      }
    }
  }
}

void qmm_reference(const float* x, int M, const Weights& w, double* y) {
  for (int n = 0; n < w.N; ++n) {
    for (int m = 0; m < M; ++m) {
      double acc = 0.0;
      for (int k = 0; k < w.K; ++k) {
        const size_t g = scale_index(w, n, k / w.group);
        const double wk = double(scalar_at(w.scales, w.type, g)) * weight_of(w, n, k)
                          + double(scalar_at(w.biases, w.type, g));
        acc += wk * double(x[size_t(m) * w.K + k]);
      }
      y[size_t(m) * w.N + n] = acc;
    }
  }
}

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28),
             f16c = c & (1u << 29);
  if (!(fma && osxsave && avx && f16c)) return false;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 6) != 6) return false;  // the OS saves the YMM registers
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  return b & (1u << 5);
#else
  return false;
#endif
}

bool cpu_has_avx512vnni() {
#if defined(__x86_64__) || defined(__i386__)
  if (!cpu_has_avx2()) return false;
  unsigned a, b, c, d;
  __cpuid_count(7, 0, a, b, c, d);
  const bool f = b & (1u << 16), bw = b & (1u << 30), vl = b & (1u << 31),
             vnni = c & (1u << 11);
  if (!(f && bw && vl && vnni)) return false;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 0xe6) == 0xe6;  // the OS saves the opmask and ZMM registers too
#else
  return false;
#endif
}

}  // namespace tk
