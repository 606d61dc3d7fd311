// The MLX primitive: Tandem's quantized matmul on MLX's CPU stream. The op
// checks its arguments as mx.quantized_matmul does, hands a GPU stream to
// MLX's own op, and otherwise builds a TandemQuantizedMatmul node whose
// eval_cpu quantizes the activations and runs the kernels for this CPU.
#include "primitive.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/ops.h"
#include "mlx/types/half_types.h"
#include "pool.h"
#include "qmm_kernels.h"

// The BLAS MLX's own matmul calls (the system OpenBLAS engine/runtime/blas.py
// loads first, else the reference BLAS libmlx.so brings): resolved at load.
extern "C" void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k,
                            float alpha, const float* a, int lda, const float* b, int ldb,
                            float beta, float* c, int ldc);

namespace tandem {

namespace {

constexpr int64_t PARALLEL_WORK = 1 << 21;  // rows x columns x K below which one thread runs
std::atomic<int64_t> parallel_work_now{PARALLEL_WORK};
constexpr int PANEL_FLOATS = 1 << 20;  // the many-rows path's float panel: 4 MiB
constexpr int SGEMM_ROWS = 24;  // rows from which the many-rows path runs (measured crossover)

std::atomic<int> sgemm_rows_now{SGEMM_ROWS};
// Packed weights: the integer kernels beat dequantized panels + sgemm at every
// row count measured (8 to 600 rows of 1536 -> 8960: 104-121 G multiply-adds/s
// against 17-95), so only tests and benchmarks send them to sgemm.
constexpr int SGEMM_ROWS_PACKED = 1 << 30;
std::atomic<int> sgemm_rows_packed_now{SGEMM_ROWS_PACKED};

constexpr int CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112;

tk::ScaleType scale_type(mx::Dtype t) {
  if (t == mx::float16) return tk::ScaleType::F16;
  if (t == mx::bfloat16) return tk::ScaleType::BF16;
  return tk::ScaleType::F32;
}

void to_float(const mx::array& x, float* out, size_t n) {
  if (x.dtype() == mx::float32) {
    std::memcpy(out, x.data<float>(), n * sizeof(float));
  } else if (x.dtype() == mx::float16) {
    const auto* p = x.data<mx::float16_t>();
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
  } else {
    const auto* p = x.data<mx::bfloat16_t>();
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
  }
}

void from_float_in(const float* y, mx::array& out, size_t n) {
  if (out.dtype() == mx::float32) {
    std::memcpy(out.data<float>(), y, n * sizeof(float));
  } else if (out.dtype() == mx::float16) {
    auto* p = out.data<mx::float16_t>();
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<mx::float16_t>(y[i]);
  } else {
    auto* p = out.data<mx::bfloat16_t>();
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<mx::bfloat16_t>(y[i]);
  }
}

bool is_float(mx::Dtype t) { return t == mx::float32 || t == mx::float16 || t == mx::bfloat16; }

// `a` itself where it is already evaluated and row-contiguous (a layer's
// weights: no extra node a call), else MLX's contiguous copy of it.
mx::array row_contiguous(const mx::array& a, mx::Stream stream) {
  if (a.is_available() && a.flags().row_contiguous) return a;
  return mx::contiguous(a, false, stream);
}

[[noreturn]] void refuse(const std::string& what) {
  throw std::invalid_argument("[tandem.quantized_matmul] " + what);
}


// Few rows (decode steps): activations quantized to int16 blocks, integer
// dot products with the packed weights, columns in fixed chunks over the
// pool (a column is computed the same on any thread).
void few_rows(const float* xf, int M, const tk::Weights& weights, float* y, int threads,
              Isa use) {
  const int K = weights.K, N = weights.N, blocks = K / tk::BLOCK;
  // The quantized activations, in buffers this thread keeps (a decode step
  // makes ~200 of these calls: no allocation each).
  thread_local std::vector<int16_t> q;
  thread_local std::vector<int8_t> q8;
  thread_local std::vector<float> sx, xs;
  thread_local std::vector<uint8_t> bad;
  sx.resize(std::max(sx.size(), size_t(M) * blocks));
  xs.resize(std::max(xs.size(), size_t(M) * blocks));
  bad.resize(std::max(bad.size(), size_t(M)));
  tk::QuantizedRows rows{M, K, weights.bits, nullptr, sx.data(), xs.data(), bad.data()};
  if (use == Isa::Avx512VnniInt8) {
#ifdef TK_X86
    q8.resize(std::max(q8.size(), size_t(M) * K));
    // Packed weights take K in order (8 bits' order), then reordered for 4 bits.
    tk::quantize_rows_int8(xf, M, K, weights.packed ? 8 : weights.bits, q8.data(), sx.data(),
                           xs.data(), bad.data());
    if (weights.packed && weights.bits == 4) tk::order_packed_int8(q8.data(), M, K);
    rows.q8 = q8.data();
#endif
  } else {
    q.resize(std::max(q.size(), size_t(M) * K));
    // Packed weights take K in order (8 bits' order), then reordered.
    const int order = weights.packed ? 8 : weights.bits;
#ifdef TK_X86
    if (runs_avx2(use)) {
      tk::quantize_rows_avx2(xf, M, K, order, q.data(), sx.data(), xs.data(), bad.data());
    } else {
      tk::quantize_rows(xf, M, K, order, q.data(), sx.data(), xs.data(), bad.data());
    }
#else
    tk::quantize_rows(xf, M, K, order, q.data(), sx.data(), xs.data(), bad.data());
#endif
    if (weights.packed) {
#ifdef TK_X86
      if (runs_avx2(use)) {
        tk::order_packed_avx2(q.data(), M, K, weights.bits);
      } else {
        tk::order_packed(q.data(), M, K, weights.bits);
      }
#else
      tk::order_packed(q.data(), M, K, weights.bits);
#endif
    }
    rows.q = q.data();
  }
  auto columns = [&](int n0, int n1) {
    if (weights.packed) {
#ifdef TK_X86
      if (use == Isa::Avx512Vnni || use == Isa::Avx512VnniInt8) {
        return tk::qmm_packed_vnni(rows, weights, y, n0, n1);
      }
      if (use == Isa::Avx2) return tk::qmm_packed_avx2(rows, weights, y, n0, n1);
#endif
      return tk::qmm_packed_generic(rows, weights, y, n0, n1);
    }
#ifdef TK_X86
    if (use == Isa::Avx512Vnni || use == Isa::Avx512VnniInt8) {
      return tk::qmm_vnni(rows, weights, y, n0, n1);  // int8 where rows.q8 is set
    }
    if (use == Isa::Avx2) return tk::qmm_avx2(rows, weights, y, n0, n1);
#endif
#ifdef TK_ARM64
    if (use == Isa::Neon) return tk::qmm_neon(rows, weights, y, n0, n1);
#endif
    tk::qmm_generic(rows, weights, y, n0, n1);
  };
  if (threads <= 1) {
    columns(0, N);
  } else {
    const int width = (std::max(8, N / (threads * 4)) + 7) / 8 * 8;  // whole column groups
    const int chunks = (N + width - 1) / width;
    tk::parallel_for(chunks, [&](int i) { columns(i * width, std::min(N, (i + 1) * width)); });
  }
}

// Many rows (a prefill chunk, a wide batch): there the integer kernels lose
// to BLAS, whose sgemm reuses each weight across rows from cache. A panel of
// columns at a time is dequantized to float32 (over the pool), then
// multiplied by sgemm (the BLAS MLX uses, with its threads); the panel
// buffer is the only float copy, a few MiB, never the matrix.
void many_rows(const float* xf, int M, const tk::Weights& weights, float* y, int threads,
               Isa use) {
  const int K = weights.K, N = weights.N;
  const int panel = std::min(N, std::max(16, PANEL_FLOATS / K / 16 * 16));
  std::vector<float> wp(size_t(panel) * K);
  int width = panel;  // packed panels are K-major: a row of `width` columns a k
  auto dequantize = [&](int n0, int n1) {
    float* at = wp.data() + size_t(n0 % panel) * K;
    if (weights.packed) {
      float* cols = wp.data() + n0 % panel;
#ifdef TK_X86
      if (runs_avx2(use)) return tk::dequantize_packed_avx2(weights, n0, n1, cols, width);
#endif
      return tk::dequantize_packed_generic(weights, n0, n1, cols, width);
    }
#ifdef TK_X86
    if (runs_avx2(use)) return tk::dequantize_avx2(weights, n0, n1, at);
#endif
#ifdef TK_ARM64
    if (use == Isa::Neon) return tk::dequantize_neon(weights, n0, n1, at);
#endif
    tk::dequantize_generic(weights, n0, n1, at);
  };
  for (int p0 = 0; p0 < N; p0 += panel) {
    const int p1 = std::min(N, p0 + panel);
    width = p1 - p0;
    if (threads <= 1) {
      dequantize(p0, p1);
    } else {
      const int rows = (std::max(1, width / (threads * 2)) + 7) / 8 * 8;  // whole groups
      const int chunks = (width + rows - 1) / rows;
      tk::parallel_for(chunks, [&](int i) {
        dequantize(p0 + i * rows, std::min(p1, p0 + (i + 1) * rows));
      });
    }
    if (weights.packed) {
      cblas_sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_NO_TRANS, M, width, K, 1.0f, xf, K,
                  wp.data(), width, 0.0f, y + p0, N);
    } else {
      cblas_sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, M, width, K, 1.0f, xf, K,
                  wp.data(), K, 0.0f, y + p0, N);
    }
  }
}

}  // namespace

void from_float(const float* y, mx::array& out, size_t n) { from_float_in(y, out, n); }

int sgemm_rows(bool packed) { return (packed ? sgemm_rows_packed_now : sgemm_rows_now).load(); }

void set_sgemm_rows(int rows, bool packed) {
  (packed ? sgemm_rows_packed_now : sgemm_rows_now).store(std::max(1, rows));
}

int64_t parallel_work() { return parallel_work_now.load(); }

void set_parallel_work(int64_t macs) { parallel_work_now.store(std::max<int64_t>(1, macs)); }

void run(const mx::array& x, const mx::array& w, const mx::array& scales,
         const mx::array& biases, mx::array& out, int group_size, int bits, Isa use,
         bool packed, int n) {
  const int K = x.shape(-1), N = packed ? n : w.shape(0);
  const int M = static_cast<int>(x.size() / K);
  // float32 in and out: read and write MLX's buffers in place.
  std::vector<float> xf_copy, y_copy;
  const float* xf = x.dtype() == mx::float32 ? x.data<float>() : nullptr;
  if (xf == nullptr) {
    xf_copy.resize(size_t(M) * K);
    to_float(x, xf_copy.data(), xf_copy.size());
    xf = xf_copy.data();
  }
  float* y = out.dtype() == mx::float32 ? out.data<float>() : nullptr;
  if (y == nullptr) {
    y_copy.resize(size_t(M) * N);
    y = y_copy.data();
  }
  tk::Weights weights{N, K, bits, group_size, w.data<uint32_t>(), scales.data<void>(),
                      biases.data<void>(), scale_type(scales.dtype()), packed};
  const int64_t work = int64_t(M) * N * K;
  const int threads = work < parallel_work_now.load() ? 1 : tk::threads();
  if (M >= sgemm_rows(packed)) {
    many_rows(xf, M, weights, y, threads, use);
  } else {
    few_rows(xf, M, weights, y, threads, use);
  }
  if (!y_copy.empty()) from_float_in(y, out, y_copy.size());
}

void TandemQuantizedMatmul::eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) {
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(stream());
  for (const auto& a : inputs) encoder.set_input_array(a);
  encoder.set_output_array(out);
  encoder.dispatch([x = mx::array::unsafe_weak_copy(inputs[0]),
                    w = mx::array::unsafe_weak_copy(inputs[1]),
                    s = mx::array::unsafe_weak_copy(inputs[2]),
                    b = mx::array::unsafe_weak_copy(inputs[3]),
                    out = mx::array::unsafe_weak_copy(out), group = group_, bits = bits_,
                    use = isa(), packed = packed_, n = n_]() mutable {
    run(x, w, s, b, out, group, bits, use, packed, n);
  });
}

void TandemQuantizedMatmul::eval_gpu(const std::vector<mx::array>&, mx::array&) {
  throw std::runtime_error("[tandem.quantized_matmul] runs on the CPU only");
}

bool TandemQuantizedMatmul::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const TandemQuantizedMatmul&>(other);
  return group_ == o.group_ && bits_ == o.bits_ && packed_ == o.packed_ && n_ == o.n_;
}

std::vector<mx::Shape> TandemQuantizedMatmul::output_shapes(
    const std::vector<mx::array>& inputs) {
  auto shape = inputs[0].shape();
  shape.back() = packed_ ? n_ : inputs[1].shape(0);
  return {shape};
}

void check_format(const mx::array& x, int group_size, int bits) {
  if (bits != 4 && bits != 8) refuse("bits must be 4 or 8, not " + std::to_string(bits));
  if (group_size != 32 && group_size != 64 && group_size != 128) {
    refuse("group_size must be 32, 64 or 128, not " + std::to_string(group_size));
  }
  if (x.ndim() < 1 || !is_float(x.dtype())) refuse("x must be a float array");
}

mx::array quantized_matmul(const mx::array& x, const mx::array& w, const mx::array& scales,
                           const mx::array& biases, int group_size, int bits,
                           mx::StreamOrDevice s) {
  check_format(x, group_size, bits);
  if (w.ndim() != 2 || w.dtype() != mx::uint32) refuse("w must be a 2-D uint32 array");
  const int K = x.shape(-1), N = w.shape(0);
  if (int64_t(w.shape(1)) * 32 / bits != K) {
    refuse("w packs " + std::to_string(int64_t(w.shape(1)) * 32 / bits) +
           " values a row, x has " + std::to_string(K));
  }
  if (K % group_size != 0) refuse("x's last axis is not a whole number of groups");
  const mx::Shape groups{N, K / group_size};
  if (scales.shape() != groups || !is_float(scales.dtype())) {
    refuse("scales must be a float array of shape (N, K / group_size)");
  }
  if (biases.shape() != groups || biases.dtype() != scales.dtype()) {
    refuse("biases must have the scales' shape and dtype");
  }
  auto stream = mx::to_stream(s);
  if (stream.device.type != mx::Device::DeviceType::cpu) {  // the GPU keeps MLX's kernels
    return mx::quantized_matmul(x, w, scales, biases, true, group_size, bits, "affine", stream);
  }
  auto shape = x.shape();
  shape.back() = N;
  return mx::array(shape, x.dtype(),
                   std::make_shared<TandemQuantizedMatmul>(stream, group_size, bits),
                   {row_contiguous(x, stream), row_contiguous(w, stream),
                    row_contiguous(scales, stream), row_contiguous(biases, stream)});
}

mx::array quantized_matmul_packed(const mx::array& x, const mx::array& w,
                                  const mx::array& scales, const mx::array& biases, int n,
                                  int group_size, int bits, mx::StreamOrDevice s) {
  check_format(x, group_size, bits);
  if (w.ndim() != 3 || w.dtype() != mx::uint32 || w.shape(2) != 8) {
    refuse("packed w must be a 3-D uint32 array (column groups, words, 8)");
  }
  const int K = x.shape(-1), groups_of_8 = w.shape(0);
  if (n <= 0 || (n + 7) / 8 != groups_of_8) {
    refuse("packed w holds " + std::to_string(groups_of_8) + " groups of 8 columns, not " +
           std::to_string(n) + " columns");
  }
  if (int64_t(w.shape(1)) * 32 / bits != K) {
    refuse("w packs " + std::to_string(int64_t(w.shape(1)) * 32 / bits) +
           " values a column, x has " + std::to_string(K));
  }
  if (K % group_size != 0) refuse("x's last axis is not a whole number of groups");
  const mx::Shape groups{groups_of_8, K / group_size, 8};
  if (scales.shape() != groups || !is_float(scales.dtype())) {
    refuse("packed scales must be a float array of shape (column groups, K / group_size, 8)");
  }
  if (biases.shape() != groups || biases.dtype() != scales.dtype()) {
    refuse("biases must have the scales' shape and dtype");
  }
  auto stream = mx::to_stream(s);
  if (stream.device.type != mx::Device::DeviceType::cpu) {
    refuse("packed weights run on a CPU stream only (a GPU lane keeps MLX's layout)");
  }
  auto shape = x.shape();
  shape.back() = n;
  return mx::array(shape, x.dtype(),
                   std::make_shared<TandemQuantizedMatmul>(stream, group_size, bits, true, n),
                   {row_contiguous(x, stream), row_contiguous(w, stream),
                    row_contiguous(scales, stream), row_contiguous(biases, stream)});
}

}  // namespace tandem
