// The portable elementwise kernels (compiled without ISA flags).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "elementwise.h"
#include "qmm_kernels.h"  // half_to_float

namespace tk {

namespace {

#include "dtype_load.h"

uint16_t to_half(float f) {  // round to nearest even, with subnormals, inf and NaN
  uint32_t b;
  std::memcpy(&b, &f, 4);
  const uint16_t sign = uint16_t((b >> 16) & 0x8000);
  const uint32_t abs = b & 0x7fffffffu;
  if (abs >= 0x7f800000u) return sign | (abs > 0x7f800000u ? 0x7e00 : 0x7c00);
  if (abs >= 0x477ff000u) return sign | 0x7c00;  // rounds past 65504: inf
  if (abs < 0x38800000u) {  // a subnormal half (or zero)
    const float scaled = std::fabs(f) * 16777216.0f;  // 2^24: units of the smallest subnormal
    return sign | uint16_t(std::nearbyint(scaled));
  }
  const uint32_t rounded = abs + 0xfff + ((abs >> 13) & 1);
  return sign | uint16_t((rounded - 0x38000000u) >> 13);
}

void store(void* p, Dtype t, size_t i, float v) {
  if (t == Dtype::F32) {
    static_cast<float*>(p)[i] = v;
    return;
  }
  uint16_t h;
  if (t == Dtype::F16) {
    h = to_half(v);
  } else {  // bfloat16: round to nearest even (NaN kept NaN)
    uint32_t b;
    std::memcpy(&b, &v, 4);
    h = (b & 0x7fffffffu) > 0x7f800000u ? uint16_t((b >> 16) | 0x40)
                                         : uint16_t((b + 0x7fff + ((b >> 16) & 1)) >> 16);
  }
  static_cast<uint16_t*>(p)[i] = h;
}

}  // namespace

void swiglu_generic(const void* gate, const void* x, void* y, Dtype type, size_t i0, size_t i1) {
  for (size_t i = i0; i < i1; ++i) {
    const float g = load1(gate, type, i);
    const float e = std::exp(-std::fabs(g));
    const float sigmoid = g >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    store(y, type, i, g * sigmoid * load1(x, type, i));
  }
}

double swiglu_reference(double gate, double x) { return gate / (1.0 + std::exp(-gate)) * x; }

}  // namespace tk
