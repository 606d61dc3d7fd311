// The arm64 kernels (NEON, the architecture's baseline: no flags, no
// run-time check). The same arithmetic as kernels_avx2.cpp: int16
// activations per 32-block, each block's 32 products exact in int32
// (widening multiply-accumulate), scaled in float. Built on arm64 only; the
// suite cross-compiles them with tests/driver.cpp and runs them under
// qemu-user where those tools exist (tests/test_kernels_arm64.py).
#include <arm_neon.h>

#include "qmm_kernels.h"

namespace tk {

namespace {

inline float scale_at(const void* data, ScaleType type, size_t i) {
  if (type == ScaleType::F16) {
    return static_cast<float>(static_cast<const __fp16*>(data)[i]);
  }
  if (type == ScaleType::BF16) {
    const unsigned bits = unsigned(static_cast<const uint16_t*>(data)[i]) << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
  }
  return static_cast<const float*>(data)[i];
}

// 32 weights of a block as four vectors of 8 int16: for 4 bits the low
// nibbles (even k) then the high ones (odd k), quantize_rows' order.
template <int BITS>
inline void unpack(const uint8_t* p, int16x8_t w[4]) {
  uint8x16_t a, b;
  if constexpr (BITS == 4) {
    const uint8x16_t v = vld1q_u8(p);
    a = vandq_u8(v, vdupq_n_u8(0x0f));
    b = vshrq_n_u8(v, 4);
  } else {
    a = vld1q_u8(p);
    b = vld1q_u8(p + 16);
  }
  w[0] = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(a)));
  w[1] = vreinterpretq_s16_u16(vmovl_high_u8(a));
  w[2] = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(b)));
  w[3] = vreinterpretq_s16_u16(vmovl_high_u8(b));
}

inline int32x4_t dot32(const int16x8_t w[4], const int16x8_t q[4]) {
  int32x4_t acc = vmull_s16(vget_low_s16(w[0]), vget_low_s16(q[0]));
  acc = vmlal_high_s16(acc, w[0], q[0]);
  for (int i = 1; i < 4; ++i) {
    acc = vmlal_s16(acc, vget_low_s16(w[i]), vget_low_s16(q[i]));
    acc = vmlal_high_s16(acc, w[i], q[i]);
  }
  return acc;
}

// R rows from m0, columns [n0, n1), C columns at a time (as the AVX2 kernel).
template <int R, int C, int BITS>
void rows(const QuantizedRows& x, const Weights& w, float* y, int m0, int n0, int n1) {
  const int blocks = w.K / BLOCK, groups = w.K / w.group, per = w.group / BLOCK;
  const size_t row_bytes = size_t(w.K) * BITS / 8;
  int n = n0;
  for (; n + C <= n1; n += C) {
    const uint8_t* wr[C];
    float32x4_t acc[R][C];
    float rest[R][C];
    for (int c = 0; c < C; ++c) {
      wr[c] = reinterpret_cast<const uint8_t*>(w.w) + (n + c) * row_bytes;
      for (int r = 0; r < R; ++r) {
        acc[r][c] = vdupq_n_f32(0.0f);
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
        int16x8_t wv[C][4];
        for (int c = 0; c < C; ++c) unpack<BITS>(wr[c] + b * BLOCK * BITS / 8, wv[c]);
        for (int r = 0; r < R; ++r) {
          const size_t at = size_t(m0 + r) * blocks + b;
          const int16_t* q = x.q + size_t(m0 + r) * w.K + b * BLOCK;
          const int16x8_t qv[4] = {vld1q_s16(q), vld1q_s16(q + 8), vld1q_s16(q + 16),
                                   vld1q_s16(q + 24)};
          const float sx = x.scale[at], xs = x.sum[at];
          for (int c = 0; c < C; ++c) {
            acc[r][c] = vfmaq_n_f32(acc[r][c], vcvtq_f32_s32(dot32(wv[c], qv)), sx * sw[c]);
            rest[r][c] += bw[c] * xs;
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) {
        y[size_t(m0 + r) * w.N + n + c] =
            x.bad[m0 + r] ? __builtin_nanf("") : vaddvq_f32(acc[r][c]) + rest[r][c];
      }
    }
  }
  if constexpr (C > 1) {
    if (n < n1) rows<R, 1, BITS>(x, w, y, m0, n, n1);
  }
}

// 16 weights (k in order) as floats: scales * q + biases.
template <int BITS>
void dequantize_row(const uint8_t* wr, const Weights& w, size_t first_group, float* o) {
  const int groups = w.K / w.group;
  for (int g = 0; g < groups; ++g) {
    const float32x4_t sw = vdupq_n_f32(scale_at(w.scales, w.type, first_group + g));
    const float32x4_t bw = vdupq_n_f32(scale_at(w.biases, w.type, first_group + g));
    for (int k = g * w.group; k < (g + 1) * w.group; k += 16) {
      uint8x16_t v;
      if constexpr (BITS == 4) {  // 8 bytes: low nibble is k, high nibble k + 1
        const uint8x8_t packed = vld1_u8(wr + k / 2);
        const uint8x8x2_t z = vzip_u8(vand_u8(packed, vdup_n_u8(0x0f)), vshr_n_u8(packed, 4));
        v = vcombine_u8(z.val[0], z.val[1]);
      } else {
        v = vld1q_u8(wr + k);
      }
      const uint16x8_t lo = vmovl_u8(vget_low_u8(v)), hi = vmovl_high_u8(v);
      const uint32x4_t parts[4] = {vmovl_u16(vget_low_u16(lo)), vmovl_high_u16(lo),
                                   vmovl_u16(vget_low_u16(hi)), vmovl_high_u16(hi)};
      for (int i = 0; i < 4; ++i) {
        vst1q_f32(o + k + 4 * i, vfmaq_f32(bw, sw, vcvtq_f32_u32(parts[i])));
      }
    }
  }
}

#include "qmm_impl.h"

}  // namespace

void dequantize_neon(const Weights& w, int n0, int n1, float* out) {
  dequantize_columns(w, n0, n1, out);
}

void qmm_neon(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1) {
  qmm_rows(x, w, y, n0, n1);
}

}  // namespace tk
