#include "kernels/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace fastdec {
namespace {

struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned sub) {
  Regs r;
  __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
  return r;
}

uint64_t read_xcr0() {
  uint32_t lo = 0, hi = 0;
  // xgetbv with ecx = 0; only valid when OSXSAVE is set (checked by the caller).
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool bit(unsigned reg, int n) { return (reg >> n) & 1u; }

// Linux keeps AMX tile data off until a process asks for it (arch_prctl
// ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 18); without it the first tile
// instruction faults.
bool request_amx_permission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr int kArchReqXcompPerm = 0x1023;
  constexpr int kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  unsigned max_ext = __get_cpuid_max(0x80000000u, nullptr);
  if (max_ext >= 0x80000004u) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      Regs r = cpuid(0x80000002u + i, 0);
      std::memcpy(brand + 16 * i, &r, 16);
    }
    f.brand = brand;
    f.brand.erase(0, f.brand.find_first_not_of(' '));
  }
  if (max_leaf < 1) return f;
  Regs l1 = cpuid(1, 0);
  bool osxsave = bit(l1.c, 27);
  f.fma = bit(l1.c, 12);
  f.f16c = bit(l1.c, 29);
  uint64_t xcr0 = osxsave ? read_xcr0() : 0;
  f.os_ymm = (xcr0 & 0x6) == 0x6;                  // SSE + AVX state
  f.os_zmm = f.os_ymm && (xcr0 & 0xe0) == 0xe0;    // opmask, ZMM_Hi256, Hi16_ZMM
  f.os_amx = (xcr0 & 0x60000) == 0x60000;          // XTILECFG + XTILEDATA
  if (max_leaf >= 7) {
    Regs l7 = cpuid(7, 0);
    f.avx2 = bit(l7.b, 5);
    f.avx512f = bit(l7.b, 16);
    f.avx512dq = bit(l7.b, 17);
    f.avx512bw = bit(l7.b, 30);
    f.avx512vl = bit(l7.b, 31);
    f.avx512vnni = bit(l7.c, 11);
    f.amx_tile = bit(l7.d, 24);
    f.amx_int8 = bit(l7.d, 25);
  }
  if (f.amx_tile && f.amx_int8 && f.os_amx) f.amx_permitted = request_amx_permission();
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

Isa detected_isa() {
  const CpuFeatures& f = cpu_features();
  bool avx2 = f.os_ymm && f.avx2 && f.fma && f.f16c;
  bool avx512 = avx2 && f.os_zmm && f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl;
  if (avx512 && f.avx512vnni && f.amx_tile && f.amx_int8 && f.amx_permitted) return Isa::kAmx;
  if (avx512 && f.avx512vnni) return Isa::kVnni;
  if (avx512) return Isa::kAvx512;
  if (avx2) return Isa::kAvx2;
  return Isa::kScalar;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kVnni: return "vnni";
    case Isa::kAmx: return "amx";
  }
  return "unknown";
}

Isa parse_isa(const std::string& name) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kVnni, Isa::kAmx}) {
    if (name == isa_name(isa)) return isa;
  }
  throw std::invalid_argument("unknown ISA '" + name +
                              "': expected one of scalar, avx2, avx512, vnni, amx");
}

}  // namespace fastdec
