#pragma once

#include <optional>
#include <vector>

#include "mlx/array.h"
#include "mlx/primitives.h"
#include "mlx/utils.h"

namespace mx = mlx::core;

namespace tandem {

// Avx512Vnni: int16 activations with vpdpwssd (the same integers as Avx2);
// Avx512VnniInt8: int8 activations with vpdpbusd (TANDEM_CPU_ACTIVATIONS=int8).
enum class Isa : int { Generic = 0, Avx2 = 1, Neon = 2, Avx512Vnni = 3, Avx512VnniInt8 = 4 };

bool runs_avx2(Isa isa);   // AVX2 code: the AVX2 ISA and those above it
std::vector<Isa> supported_isas();  // what this CPU can run, generic first

Isa isa();                 // the kernels this process runs (detected at first use)
void force_isa(Isa isa);   // tests and benchmarks: only as far as the CPU allows
const char* isa_name(Isa isa);
// Rows from which the many-rows path (dequantized panels, sgemm) runs, for
// MLX's layout or the packed one; the setter for tests and benchmarks.
int sgemm_rows(bool packed = false);
void set_sgemm_rows(int rows, bool packed = false);
int64_t parallel_work();       // multiply-adds from which a product runs on the pool
void set_parallel_work(int64_t macs);

class TandemQuantizedMatmul : public mx::UnaryPrimitive {
 public:
  // packed: the weights in Tandem's packed layout (qmm_kernels.h Weights),
  // n_ of their columns real.
  TandemQuantizedMatmul(mx::Stream stream, int group_size, int bits, bool packed = false,
                        int n = 0)
      : mx::UnaryPrimitive(stream), group_(group_size), bits_(bits), packed_(packed), n_(n) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override;
  void eval_gpu(const std::vector<mx::array>& inputs, mx::array& out) override;
  const char* name() const override { return "TandemQuantizedMatmul"; }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;

 private:
  int group_, bits_;
  bool packed_;
  int n_;
};

// Few-query attention (src/attention.h): q (B, Hq, L, D), k and v (B, Hkv, N, D).
class TandemAttention : public mx::UnaryPrimitive {
 public:
  TandemAttention(mx::Stream stream, float scale, bool causal)
      : mx::UnaryPrimitive(stream), scale_(scale), causal_(causal) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override;
  void eval_gpu(const std::vector<mx::array>& inputs, mx::array& out) override;
  const char* name() const override { return "TandemAttention"; }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;

 private:
  float scale_;
  bool causal_;
};

mx::array attention(const mx::array& q, const mx::array& k, const mx::array& v, float scale,
                    bool causal, const std::optional<mx::array>& mask,
                    mx::StreamOrDevice s = {});

// silu(gate) * x elementwise (src/elementwise.h), on a CPU stream.
class TandemSwiglu : public mx::UnaryPrimitive {
 public:
  explicit TandemSwiglu(mx::Stream stream) : mx::UnaryPrimitive(stream) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override;
  void eval_gpu(const std::vector<mx::array>& inputs, mx::array& out) override;
  const char* name() const override { return "TandemSwiglu"; }
  bool is_equivalent(const mx::Primitive&) const override { return true; }
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;
};

mx::array swiglu(const mx::array& gate, const mx::array& x, mx::StreamOrDevice s = {});

// float32 results into `out`'s dtype (float16, bfloat16 or float32).
void from_float(const float* y, mx::array& out, size_t n);

mx::array quantized_matmul(const mx::array& x, const mx::array& w, const mx::array& scales,
                           const mx::array& biases, int group_size, int bits,
                           mx::StreamOrDevice s = {});

// The same product on packed weights (qmm_kernels.h; engine/runtime/qmm.py
// `pack` makes them): w (ceil(n / 8), K * bits / 32, 8) uint32, scales and
// biases (ceil(n / 8), K / group_size, 8); CPU streams only.
mx::array quantized_matmul_packed(const mx::array& x, const mx::array& w,
                                  const mx::array& scales, const mx::array& biases, int n,
                                  int group_size, int bits, mx::StreamOrDevice s = {});

}  // namespace tandem
