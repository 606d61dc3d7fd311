// The Python module engine.runtime._tandem_kernels (engine/runtime/qmm.py loads it).
#include <nanobind/nanobind.h>
#include <nanobind/stl/vector.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/variant.h>

#include "mlx/version.h"
#include "pool.h"
#include "primitive.h"

namespace nb = nanobind;
using namespace nb::literals;

#define TK_STR2(x) #x
#define TK_STR(x) TK_STR2(x)

NB_MODULE(_tandem_kernels, m) {
  m.doc() = "Tandem's quantized matmul for MLX's CPU stream";
  m.attr("MLX_VERSION") = TK_STR(MLX_VERSION_MAJOR) "." TK_STR(MLX_VERSION_MINOR) "." TK_STR(
      MLX_VERSION_PATCH);
  m.attr("NANOBIND_VERSION") = TK_STR(NB_VERSION_MAJOR) "." TK_STR(NB_VERSION_MINOR) "." TK_STR(
      NB_VERSION_PATCH);
  m.def("runtime_mlx_version", [] { return mx::version(); },
        "The version of the libmlx this module runs against.");
  m.def("isa", [] { return std::string(tandem::isa_name(tandem::isa())); },
        "The kernels this process runs: 'avx512vnni', 'avx2', 'neon' or 'generic' (or "
        "'avx512vnni-int8', int8 activations, where forced).");
  m.def(
      "isas",
      [] {
        std::vector<std::string> out;
        for (auto i : tandem::supported_isas()) out.emplace_back(tandem::isa_name(i));
        return out;
      },
      "The kernels this CPU can run, generic first (avx512vnni-int8: int8 activations).");
  m.def(
      "force_isa",
      [](const std::string& name) {
        for (auto i : {tandem::Isa::Generic, tandem::Isa::Avx2, tandem::Isa::Avx512Vnni,
                       tandem::Isa::Avx512VnniInt8, tandem::Isa::Neon}) {
          if (name == tandem::isa_name(i)) return tandem::force_isa(i);
        }
        throw std::invalid_argument("unknown instruction set: " + name);
      },
      "name"_a, "Run these kernels from now on (never more than the CPU has).");
  m.def("sgemm_rows", &tandem::sgemm_rows, "packed"_a = false,
        "Rows from which a product dequantizes panels of weights and runs sgemm (MLX's "
        "layout, or the packed one).");
  m.def("set_sgemm_rows", &tandem::set_sgemm_rows, "rows"_a, "packed"_a = false,
        "Tests and benchmarks: the rows from which the sgemm path runs.");
  m.def("parallel_work", &tandem::parallel_work,
        "Multiply-adds (rows x columns x K) from which a product runs on the pool.");
  m.def("set_parallel_work", &tandem::set_parallel_work, "macs"_a,
        "Tests and benchmarks: the multiply-adds from which a product runs on the pool.");
  m.def("set_threads", &tk::set_threads, "n"_a,
        "The threads a matmul may use, the caller included (the lane's cores).");
  m.def("threads", &tk::threads, "The threads a matmul may use.");
  m.def("spin_us", &tk::spin_us, "How long an idle worker polls for the next job (us).");
  m.def("set_spin_us", &tk::set_spin_us, "us"_a,
        "Tests and benchmarks: how long an idle worker polls before it sleeps.");
  m.def("abi_probe", [](const mx::array& a) { return static_cast<int64_t>(a.size()); }, "a"_a,
        "Takes an mx.array: fails where this module's nanobind cannot see MLX's arrays.");
  m.def("attention", &tandem::attention, "q"_a, "k"_a, "v"_a, "scale"_a, "causal"_a = false,
        "mask"_a = nb::none(), nb::kw_only(), "stream"_a = nb::none(),
        "softmax(scale * q @ k.T + mask) @ v for few queries on a CPU stream (GQA: q's heads "
        "a multiple of k's); mask: additive float or boolean (true: attend), broadcast.");
  m.def("quantized_matmul", &tandem::quantized_matmul, "x"_a, "w"_a, "scales"_a, "biases"_a,
        "group_size"_a, "bits"_a, nb::kw_only(), "stream"_a = nb::none(),
        "x @ dequantize(w, scales, biases).T for MLX's affine 4- and 8-bit formats.");
  m.def("swiglu", &tandem::swiglu, "gate"_a, "x"_a, nb::kw_only(), "stream"_a = nb::none(),
        "silu(gate) * x elementwise (same shape and float dtype) on a CPU stream.");
  m.def("quantized_matmul_packed", &tandem::quantized_matmul_packed, "x"_a, "w"_a, "scales"_a,
        "biases"_a, "n"_a, "group_size"_a, "bits"_a, nb::kw_only(), "stream"_a = nb::none(),
        "The same product on packed weights (8 columns' words interleaved: w (ceil(n / 8), "
        "K * bits / 32, 8), scales and biases (ceil(n / 8), K / group_size, 8)); CPU only.");
}
