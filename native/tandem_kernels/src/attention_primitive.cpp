// The MLX primitive for Tandem's few-query attention on MLX's CPU stream
// (engine/runtime/attention.py decides when a model's attention calls it).
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention.h"
#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/ops.h"
#include "pool.h"
#include "primitive.h"
#include "qmm_kernels.h"

namespace tandem {

namespace {

constexpr int64_t PARALLEL_WORK = 1 << 17;  // B x Hq x L x N x D below which one thread runs

[[noreturn]] void refuse(const std::string& what) {
  throw std::invalid_argument("[tandem.attention] " + what);
}

bool is_float(mx::Dtype t) { return t == mx::float32 || t == mx::float16 || t == mx::bfloat16; }

tk::Dtype dtype_of(mx::Dtype t) {
  if (t == mx::float16) return tk::Dtype::F16;
  if (t == mx::bfloat16) return tk::Dtype::BF16;
  return tk::Dtype::F32;
}

tk::Tensor4 view(const mx::array& a) {
  return {a.data<void>(), dtype_of(a.dtype()), int64_t(a.strides()[0]), int64_t(a.strides()[1]),
          int64_t(a.strides()[2])};
}

// The last axis contiguous (any strides elsewhere: a KV cache's slice is kept as is).
mx::array last_contiguous(const mx::array& a, mx::Stream s) {
  return a.strides().back() == 1 || a.shape().back() == 1 ? a : mx::contiguous(a, false, s);
}

void run(const mx::array& q, const mx::array& k, const mx::array& v, const mx::array* mask,
         mx::array& out, float scale, bool causal, Isa use) {
  tk::AttentionArgs a;
  a.B = q.shape(0), a.Hq = q.shape(1), a.L = q.shape(2), a.D = q.shape(3);
  a.Hkv = k.shape(1), a.N = k.shape(2);
  a.scale = scale, a.causal = causal;
  a.q = view(q), a.k = view(k), a.v = view(v);
  if (mask != nullptr) {
    a.mask = mask->data<void>();
    a.mask_bool = mask->dtype() == mx::bool_;
    a.m0 = mask->strides()[0], a.m1 = mask->strides()[1], a.m2 = mask->strides()[2];
    a.m3 = mask->strides()[3];
  }
  const size_t count = size_t(a.B) * a.Hq * a.L * a.D;
  std::vector<float> y_copy;
  a.out = out.dtype() == mx::float32 ? out.data<float>() : nullptr;
  if (a.out == nullptr) {
    y_copy.resize(count);
    a.out = y_copy.data();
  }
  const int heads = a.B * a.Hq;
  const size_t per = size_t(a.L) * (size_t(a.N) + a.D);
  auto part = [&](int h0, int h1, float* scratch) {
#ifdef TK_X86
    if (runs_avx2(use)) return tk::attention_avx2(a, h0, h1, scratch);
#endif
    tk::attention_generic(a, h0, h1, scratch);
  };
  const int64_t work = int64_t(heads) * a.L * a.N * a.D;
  const int threads = work < PARALLEL_WORK ? 1 : std::min(tk::threads(), heads);
  if (threads <= 1) {
    std::vector<float> scratch(per);
    part(0, heads, scratch.data());
  } else {
    const int chunks = std::min(heads, threads * 2);
    std::vector<float> scratch(per * chunks);
    tk::parallel_for(chunks, [&](int i) {
      part(int(int64_t(heads) * i / chunks), int(int64_t(heads) * (i + 1) / chunks),
           scratch.data() + per * i);
    });
  }
  if (!y_copy.empty()) from_float(y_copy.data(), out, count);
}

}  // namespace

void TandemAttention::eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) {
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(stream());
  for (const auto& a : inputs) encoder.set_input_array(a);
  encoder.set_output_array(out);
  const bool has_mask = inputs.size() > 3;
  encoder.dispatch([q = mx::array::unsafe_weak_copy(inputs[0]),
                    k = mx::array::unsafe_weak_copy(inputs[1]),
                    v = mx::array::unsafe_weak_copy(inputs[2]),
                    m = mx::array::unsafe_weak_copy(has_mask ? inputs[3] : inputs[0]),
                    out = mx::array::unsafe_weak_copy(out), has_mask, scale = scale_,
                    causal = causal_, use = isa()]() mutable {
    run(q, k, v, has_mask ? &m : nullptr, out, scale, causal, use);
  });
}

void TandemAttention::eval_gpu(const std::vector<mx::array>&, mx::array&) {
  throw std::runtime_error("[tandem.attention] runs on the CPU only");
}

bool TandemAttention::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const TandemAttention&>(other);
  return scale_ == o.scale_ && causal_ == o.causal_;
}

std::vector<mx::Shape> TandemAttention::output_shapes(const std::vector<mx::array>& inputs) {
  return {inputs[0].shape()};
}

mx::array attention(const mx::array& q, const mx::array& k, const mx::array& v, float scale,
                    bool causal, const std::optional<mx::array>& mask, mx::StreamOrDevice s) {
  if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4) refuse("q, k and v must be 4-D");
  if (!is_float(q.dtype()) || !is_float(k.dtype()) || !is_float(v.dtype())) {
    refuse("q, k and v must be float arrays");
  }
  const int B = q.shape(0), Hq = q.shape(1), L = q.shape(2), D = q.shape(3);
  const int Hkv = k.shape(1), N = k.shape(2);
  if (k.shape() != v.shape() || k.shape(0) != B || k.shape(3) != D) {
    refuse("k and v must be (B, Hkv, N, D) with q's B and D");
  }
  if (Hkv < 1 || Hq % Hkv != 0) refuse("q's heads must be a multiple of k's");
  if (causal && mask) refuse("a mask array or causal, not both");
  auto stream = mx::to_stream(s);
  if (stream.device.type != mx::Device::DeviceType::cpu) refuse("runs on a CPU stream only");
  std::vector<mx::array> inputs{last_contiguous(q, stream), last_contiguous(k, stream),
                                last_contiguous(v, stream)};
  if (mask) {
    mx::array m = *mask;
    if (m.dtype() != mx::bool_ && m.dtype() != mx::float32) m = mx::astype(m, mx::float32, stream);
    if (m.ndim() > 4) refuse("the mask has more than 4 axes");
    inputs.push_back(mx::broadcast_to(m, {B, Hq, L, N}, stream));
  }
  return mx::array(q.shape(), q.dtype(),
                   std::make_shared<TandemAttention>(stream, scale, causal), std::move(inputs));
}

}  // namespace tandem
