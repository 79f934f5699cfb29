#include "kernels/dispatch.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace fastdec {
namespace {

const KernelTable& table_of(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return kernels_scalar();
    case Isa::kAvx2: return kernels_avx2();
    case Isa::kAvx512: return kernels_avx512();
    case Isa::kVnni:
    case Isa::kAmx: return kernels_vnni();  // no AMX kernels yet (see cpu_features.h)
  }
  return kernels_scalar();
}

IsaChoice choose() {
  IsaChoice c;
  c.detected = detected_isa();
  c.requested = c.detected;
  if (const char* env = std::getenv("FASTDEC_ISA"); env && *env) {
    try {
      c.requested = parse_isa(env);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("FASTDEC_ISA: ") + e.what());
    }
    c.forced = true;
  }
  c.chosen = std::min({c.requested, c.detected, best_implemented_isa()});
  return c;
}

}  // namespace

const IsaChoice& isa_choice() {
  static const IsaChoice choice = choose();
  return choice;
}

const KernelTable& active_kernels() {
  static const KernelTable& table = table_of(isa_choice().chosen);
  return table;
}

const KernelTable& kernels_for(Isa isa) {
  if (isa > detected_isa())
    throw std::invalid_argument(std::string("ISA '") + isa_name(isa) +
                                "' is not supported by this CPU (highest: " +
                                isa_name(detected_isa()) + ")");
  return table_of(std::min(isa, best_implemented_isa()));
}

}  // namespace fastdec
