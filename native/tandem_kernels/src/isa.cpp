// Which kernels this process runs: detected from the CPU at first use (never
// assumed from the build's flags), lowered by force_isa for tests and
// benchmarks, never raised past what the CPU has.
#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <vector>

#include "primitive.h"
#include "qmm_kernels.h"

namespace tandem {

namespace {

std::atomic<int> chosen{-1};  // Isa, chosen at first use (force_isa may lower it)

// The best this CPU runs on int16 activations. int8 (Avx512VnniInt8, 5-16%
// faster than int16 on VNNI) lost more than the 1% of perplexity the issue
// allows on the bundled model (1.017x), so it runs only where asked for
// (TANDEM_CPU_ACTIVATIONS=int8, engine/runtime/qmm.py).
Isa detect() {
#ifdef TK_ARM64
  return Isa::Neon;  // the architecture's baseline
#else
  if (tk::cpu_has_avx512vnni()) return Isa::Avx512Vnni;
  return tk::cpu_has_avx2() ? Isa::Avx2 : Isa::Generic;
#endif
}

}  // namespace

Isa isa() {
  int now = chosen.load();
  if (now < 0) {
    now = static_cast<int>(detect());
    chosen.store(now);
  }
  return static_cast<Isa>(now);
}

bool runs_avx2(Isa i) {
  return i == Isa::Avx2 || i == Isa::Avx512Vnni || i == Isa::Avx512VnniInt8;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out{Isa::Generic};
  const Isa best = detect();
  if (runs_avx2(best)) out.push_back(Isa::Avx2);
  if (best == Isa::Avx512Vnni) out.insert(out.end(), {Isa::Avx512Vnni, Isa::Avx512VnniInt8});
  if (best == Isa::Neon) out.push_back(best);
  return out;
}

void force_isa(Isa wanted) {
  const auto ok = supported_isas();
  if (std::find(ok.begin(), ok.end(), wanted) == ok.end()) {
    throw std::invalid_argument("this CPU cannot run that instruction set");
  }
  chosen.store(static_cast<int>(wanted));
}

const char* isa_name(Isa i) {
  switch (i) {
    case Isa::Avx2: return "avx2";
    case Isa::Avx512Vnni: return "avx512vnni";
    case Isa::Avx512VnniInt8: return "avx512vnni-int8";
    case Isa::Neon: return "neon";
    default: return "generic";
  }
}

}  // namespace tandem
