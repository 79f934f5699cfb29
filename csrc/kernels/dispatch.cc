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
    case Isa::kVnni: return kernels_vnni();
    case Isa::kAmx: return kernels_amx();
  }
  return kernels_scalar();
}

IsaChoice choose() {
  IsaChoice c;
  c.detected = detected_isa();
  c.requested = c.detected;
  if (const char* env = std::getenv("FASTDEC_ISA"); env && *env) {
    if (std::string(env) == "amx-emulated") {
      c.forced = c.amx_emulated = true;
      c.requested = c.chosen = Isa::kAmx;
      return c;
    }
    try {
      c.requested = parse_isa(env);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("FASTDEC_ISA: ") + e.what());
    }
    c.forced = true;
  }
  c.chosen = std::min(c.requested, c.detected);  // every family has kernels of its own
  return c;
}

// VNNI's table with isa_amx.cc's int8 pieces, assembled here, in a baseline unit: copying
// the tables is code, and code in isa_amx.cc may use AVX-512 (it runs on AMX CPUs only).
KernelTable amx_table(const char* name, bool tiles_only) {
  const AmxInt8Kernels& amx = amx_int8_kernels();
  KernelTable t = kernels_vnni();
  t.isa = Isa::kAmx;
  t.name = name;
  t.i8_cols_per_block = amx.cols_per_block;
  t.i8_packed_bytes = amx.packed_bytes;
  t.i8_pack = amx.pack;
  t.i8_gemm = tiles_only ? amx.gemm_tiles : amx.gemm;
  return t;
}

}  // namespace

const KernelTable& kernels_amx() {
  static const KernelTable table = amx_table("amx", false);
  return table;
}

const KernelTable& kernels_amx_tiles() {
  static const KernelTable table = amx_table("amx-tiles", true);
  return table;
}

int amx_min_rows() { return amx_int8_kernels().min_rows; }

const IsaChoice& isa_choice() {
  static const IsaChoice choice = choose();
  return choice;
}

const KernelTable& active_kernels() {
  static const KernelTable& table =
      isa_choice().amx_emulated ? kernels_amx_emulated() : table_of(isa_choice().chosen);
  return table;
}

const KernelTable& kernels_for(Isa isa) {
  if (isa > detected_isa())
    throw std::invalid_argument(std::string("ISA '") + isa_name(isa) +
                                "' is not supported by this CPU (highest: " +
                                isa_name(detected_isa()) + ")");
  return table_of(isa);
}

const KernelTable& kernels_named(const std::string& name) {
  if (name == "amx-emulated") return kernels_amx_emulated();
  if (name == "amx-tiles") {
    kernels_for(Isa::kAmx);  // throws on a CPU without AMX
    return kernels_amx_tiles();
  }
  return kernels_for(parse_isa(name));
}

const char* table_label(const KernelTable& kt) {
  // The AMX tables' names are their labels. By name, not by comparing addresses with
  // kernels_amx_tiles(): building that table runs code compiled for AVX-512.
  return kt.isa == Isa::kAmx ? kt.name : isa_name(kt.isa);
}

}  // namespace fastdec
