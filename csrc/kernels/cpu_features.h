// What the CPU and the OS let us run, and which kernel family is chosen.
#pragma once
#include <string>

namespace fastdec {

// Kernel families, lowest to highest. Each has its own translation unit (isa_*.cc).
enum class Isa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kVnni = 3, kAmx = 4 };

struct CpuFeatures {
  std::string brand;
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool avx512vnni = false;
  bool amx_tile = false, amx_int8 = false;
  bool os_ymm = false;     // XCR0 enables YMM state (AVX)
  bool os_zmm = false;     // XCR0 enables opmask + ZMM state (AVX-512)
  bool os_amx = false;     // XCR0 enables tile config + tile data
  bool amx_permitted = false;  // Linux granted XTILEDATA to this process
};

const CpuFeatures& cpu_features();

// Highest family this CPU and OS can run.
Isa detected_isa();

const char* isa_name(Isa isa);
// Parses "scalar|avx2|avx512|vnni|amx"; throws std::invalid_argument otherwise.
Isa parse_isa(const std::string& name);

}  // namespace fastdec
