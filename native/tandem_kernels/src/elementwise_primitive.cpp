// The MLX primitive for Tandem's elementwise kernels on MLX's CPU stream
// (engine/runtime/swiglu.py decides when a model's MLP calls it).
#include <stdexcept>
#include <string>

#include "elementwise.h"
#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/ops.h"
#include "pool.h"
#include "primitive.h"
#include "qmm_kernels.h"

namespace tandem {

namespace {

constexpr size_t PARALLEL_ELEMENTS = 1 << 15;  // below this one thread runs
constexpr size_t CHUNK = 1 << 13;              // elements a pool job

[[noreturn]] void refuse(const std::string& what) {
  throw std::invalid_argument("[tandem.swiglu] " + what);
}

tk::Dtype dtype_of(mx::Dtype t) {
  if (t == mx::float16) return tk::Dtype::F16;
  if (t == mx::bfloat16) return tk::Dtype::BF16;
  return tk::Dtype::F32;
}

void run(const mx::array& gate, const mx::array& x, mx::array& out, Isa use) {
  const size_t n = out.size();
  const tk::Dtype type = dtype_of(out.dtype());
  auto part = [&](size_t i0, size_t i1) {
#ifdef TK_X86
    if (runs_avx2(use)) {
      return tk::swiglu_avx2(gate.data<void>(), x.data<void>(), out.data<void>(), type, i0, i1);
    }
#endif
    tk::swiglu_generic(gate.data<void>(), x.data<void>(), out.data<void>(), type, i0, i1);
  };
  if (n < PARALLEL_ELEMENTS || tk::threads() <= 1) return part(0, n);
  const int chunks = int((n + CHUNK - 1) / CHUNK);
  tk::parallel_for(chunks, [&](int i) { part(size_t(i) * CHUNK, std::min(n, size_t(i + 1) * CHUNK)); });
}

}  // namespace

void TandemSwiglu::eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) {
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(stream());
  for (const auto& a : inputs) encoder.set_input_array(a);
  encoder.set_output_array(out);
  encoder.dispatch([gate = mx::array::unsafe_weak_copy(inputs[0]),
                    x = mx::array::unsafe_weak_copy(inputs[1]),
                    out = mx::array::unsafe_weak_copy(out), use = isa()]() mutable {
    run(gate, x, out, use);
  });
}

void TandemSwiglu::eval_gpu(const std::vector<mx::array>&, mx::array&) {
  throw std::runtime_error("[tandem.swiglu] runs on the CPU only");
}

std::vector<mx::Shape> TandemSwiglu::output_shapes(const std::vector<mx::array>& inputs) {
  return {inputs[0].shape()};
}

mx::array swiglu(const mx::array& gate, const mx::array& x, mx::StreamOrDevice s) {
  if (gate.shape() != x.shape()) refuse("gate and x must have the same shape");
  if (gate.dtype() != x.dtype()) refuse("gate and x must have the same dtype");
  const auto t = gate.dtype();
  if (t != mx::float32 && t != mx::float16 && t != mx::bfloat16) refuse("a float dtype only");
  auto stream = mx::to_stream(s);
  if (stream.device.type != mx::Device::DeviceType::cpu) refuse("runs on a CPU stream only");
  auto contiguous = [&](const mx::array& a) {
    return a.is_available() && a.flags().row_contiguous ? a : mx::contiguous(a, false, stream);
  };
  return mx::array(gate.shape(), t, std::make_shared<TandemSwiglu>(stream),
                   {contiguous(gate), contiguous(x)});
}

}  // namespace tandem
