// Which kernel table runs: chosen once per process from cpuid/xgetbv and FASTDEC_ISA.
#pragma once
#include <string>

#include "kernels/cpu_features.h"
#include "kernels/kernel_table.h"

namespace fastdec {

struct IsaChoice {
  Isa detected;             // highest the CPU + OS can run
  bool forced = false;      // FASTDEC_ISA was set
  Isa requested;            // FASTDEC_ISA, or `detected`
  Isa chosen;               // min(requested, detected): every family has kernels
  // FASTDEC_ISA=amx-emulated: the AMX table on emulated tiles (kernels_amx_emulated),
  // on any CPU; requested and chosen read kAmx. For tests of whole models: slow.
  bool amx_emulated = false;
};

// Throws std::invalid_argument if FASTDEC_ISA names no known ISA.
const IsaChoice& isa_choice();

// The table for the chosen ISA.
const KernelTable& active_kernels();

// The table for a given ISA; throws std::invalid_argument if this CPU cannot run it.
// (Tests use this to check every path this machine has in one process.)
const KernelTable& kernels_for(Isa isa);

// kernels_for(parse_isa(name)), plus two tables no FASTDEC_ISA value picks (the
// bindings' isa= argument, for tests and benchmarks): "amx-emulated" (the AMX GEMM on
// emulated tiles, any CPU) and "amx-tiles" (AMX at every row count; AMX CPUs only).
const KernelTable& kernels_named(const std::string& name);
// The name kernels_named takes for a table.
const char* table_label(const KernelTable& kt);

}  // namespace fastdec
