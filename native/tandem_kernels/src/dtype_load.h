// One value of a float32, float16 or bfloat16 buffer as a float: the scalar
// load of the attention and elementwise kernels (their tails, and the
// portable paths). Included inside `namespace tk { namespace { ... } }`
// after attention.h (Dtype) and qmm_kernels.h (half_to_float, compiled
// without ISA flags), so each file keeps its own copy.

inline float load1(const void* x, Dtype t, size_t i) {
  if (t == Dtype::F32) return static_cast<const float*>(x)[i];
  const uint16_t h = static_cast<const uint16_t*>(x)[i];
  if (t == Dtype::F16) return half_to_float(h);
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}
