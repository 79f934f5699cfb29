// The AMX tile operations the int8 GEMM (amx_gemm.h) is written against, in two
// implementations with one interface:
//
//   TileOpsHw   the instructions (LDTILECFG, TILELOADD, TILESTORED, TILEZERO, TDPBUSD,
//               TILERELEASE); needs -mamx-tile -mamx-int8, a CPU with AMX-INT8 and the
//               OS permission cpu_features.cc asks for.
//   TileOpsEmu  portable C++ following the Operation sections of Intel's SDM for the
//               same instructions (zeroing of the bytes and rows outside a tile's shape
//               included), with the shape checks whose failure the hardware answers
//               with #UD/#GP turned into an abort, so the kernel runs, and is tested bit
//               for bit, on CPUs without AMX.
//
// Tiles are named by compile-time numbers 0..7 (template arguments), as the hardware
// encodes them in the instruction. Internal linkage: see isa_common.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fastdec {
namespace {  // NOLINT(build/namespaces): per-TU copies are the point

// LDTILECFG's 64-byte operand, palette 1: 8 tiles of at most 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved0[14] = {};
  uint16_t colsb[8] = {};  // bytes 16..31: bytes per row of tiles 0..7
  uint8_t reserved1[16] = {};
  uint8_t rows[8] = {};    // bytes 48..55: rows of tiles 0..7
  uint8_t reserved2[8] = {};
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads exactly 64 bytes");
static_assert(offsetof(TileConfig, colsb) == 16 && offsetof(TileConfig, rows) == 48,
              "the SDM's byte offsets");

constexpr int kTiles = 8, kTileMaxRows = 16, kTileMaxColsb = 64;

#if defined(__AMX_TILE__) && defined(__AMX_INT8__)
// Written as asm with the tile number as an "n" operand: GCC's _tile_loadd/_tile_dpbusd
// macros stringify their tile argument, so they take literal digits only (not a template
// parameter), and neither their loads nor _tile_loadconfig tell the compiler which
// memory they read (ldtilecfg declares 8 of its 64 bytes), so the config and the data
// could be left unwritten. Here every memory operand is declared.
struct TileOpsHw {
  static void config(const TileConfig& c) { __asm__ volatile("ldtilecfg %0" ::"m"(c)); }
  static void release() { __asm__ volatile("tilerelease" ::: "memory"); }
  template <int T>
  static void zero() {
    __asm__ volatile("tilezero %%tmm%c0" ::"n"(T));
  }
  template <int T>
  static void load(const void* base, size_t stride) {
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(stride), "n"(T) : "memory");
  }
  template <int T>
  static void store(void* base, size_t stride) {
    __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(base), "r"(stride), "n"(T) : "memory");
  }
  // C += A (unsigned bytes) . B (signed bytes), four products per int32 (AT&T order).
  template <int C, int A, int B>
  static void dpbusd() {
    __asm__ volatile("tdpbusd %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"n"(C), "n"(A), "n"(B));
  }
};
#endif

[[noreturn]] inline void tile_fault(const char* what, const char* op = "") {
  std::fprintf(stderr, "fastdec AMX emulation: %s%s%s (the hardware would fault here)\n", op, *op ? ": " : "",
               what);
  std::abort();
}

struct TileOpsEmu {
  struct State {
    TileConfig cfg;
    bool configured = false;  // LDTILECFG with palette 1 ran, no TILERELEASE since
    alignas(64) uint8_t tile[kTiles][kTileMaxRows][kTileMaxColsb] = {};
  };
  // Tile state is per thread, as the hardware's (saved and restored with the thread).
  static State& state() {
    thread_local State s;
    return s;
  }

  static void config(const TileConfig& c) {
    if (c.palette != 1) tile_fault("LDTILECFG: palette must be 1");
    for (uint8_t b : c.reserved0) if (b) tile_fault("LDTILECFG: reserved bytes 2..15 must be 0");
    for (uint8_t b : c.reserved1) if (b) tile_fault("LDTILECFG: reserved bytes 32..47 must be 0");
    for (uint8_t b : c.reserved2) if (b) tile_fault("LDTILECFG: reserved bytes 56..63 must be 0");
    for (int t = 0; t < kTiles; ++t) {
      if (c.rows[t] > kTileMaxRows || c.colsb[t] > kTileMaxColsb)
        tile_fault("LDTILECFG: a tile above 16 rows x 64 bytes");
      if ((c.rows[t] == 0) != (c.colsb[t] == 0)) tile_fault("LDTILECFG: rows and colsb must be both 0 or both set");
    }
    State& s = state();
    s.cfg = c;
    s.configured = true;
    std::memset(s.tile, 0, sizeof(s.tile));  // LDTILECFG zeroes the tile data
  }
  static void release() {
    State& s = state();
    s.configured = false;
    std::memset(s.tile, 0, sizeof(s.tile));
  }
  template <int T>
  static void zero() {
    static_assert(T >= 0 && T < kTiles, "tile number");
    check_configured<T>("TILEZERO");
    std::memset(state().tile[T], 0, sizeof(state().tile[T]));  // every row, all 64 bytes
  }
  // TILELOADD: row r of the tile = colsb bytes at base + r * stride, the rest of the row
  // and the rows past `rows` zero.
  template <int T>
  static void load(const void* base, size_t stride) {
    check_configured<T>("TILELOADD");
    State& s = state();
    const int rows = s.cfg.rows[T], colsb = s.cfg.colsb[T];
    std::memset(s.tile[T], 0, sizeof(s.tile[T]));
    for (int r = 0; r < rows; ++r)
      std::memcpy(s.tile[T][r], static_cast<const uint8_t*>(base) + r * stride, static_cast<size_t>(colsb));
  }
  // TILESTORED: colsb bytes of each of the tile's rows, row r at base + r * stride.
  template <int T>
  static void store(void* base, size_t stride) {
    check_configured<T>("TILESTORED");
    const State& s = state();
    for (int r = 0; r < s.cfg.rows[T]; ++r)
      std::memcpy(static_cast<uint8_t*>(base) + r * stride, s.tile[T][r], s.cfg.colsb[T]);
  }
  // TDPBUSD, the SDM's pseudocode:
  //   for m < C.rows, k < A.colsb / 4, n < C.colsb / 4:
  //     C[m].dword[n] += sum_{i<4} ZeroExtend(A[m].byte[4k+i]) * SignExtend(B[k].byte[4n+i])
  // in wrapping 32-bit arithmetic, then the bytes of C past colsb and its rows past
  // `rows` are zeroed. Shape rules (#UD otherwise): distinct tiles, all configured,
  // C.rows == A.rows, B.rows == A.colsb / 4, C.colsb == B.colsb, colsb multiples of 4.
  template <int C, int A, int B>
  static void dpbusd() {
    static_assert(C != A && C != B && A != B, "TDPBUSD needs three distinct tiles (#UD)");
    check_configured<C>("TDPBUSD dst");
    check_configured<A>("TDPBUSD src1");
    check_configured<B>("TDPBUSD src2");
    State& s = state();
    const TileConfig& g = s.cfg;
    if (g.rows[C] != g.rows[A]) tile_fault("TDPBUSD: dst.rows != src1.rows");
    if (g.colsb[A] % 4 || g.colsb[C] % 4) tile_fault("TDPBUSD: colsb not a multiple of 4");
    if (g.rows[B] != g.colsb[A] / 4) tile_fault("TDPBUSD: src2.rows != src1.colsb / 4");
    if (g.colsb[C] != g.colsb[B]) tile_fault("TDPBUSD: dst.colsb != src2.colsb");
    const int rows = g.rows[C], ks = g.colsb[A] / 4, ns = g.colsb[C] / 4;
    for (int m = 0; m < rows; ++m) {
      uint32_t out[kTileMaxColsb / 4];
      std::memcpy(out, s.tile[C][m], sizeof(out));
      for (int k = 0; k < ks; ++k) {
        const uint8_t* a = s.tile[A][m] + 4 * k;
        for (int n = 0; n < ns; ++n) {
          const auto* b = reinterpret_cast<const int8_t*>(s.tile[B][k]) + 4 * n;
          uint32_t sum = out[n];
          for (int i = 0; i < 4; ++i)
            sum += static_cast<uint32_t>(int32_t{a[i]} * int32_t{b[i]});
          out[n] = sum;
        }
      }
      std::memset(out + ns, 0, sizeof(out) - sizeof(uint32_t) * static_cast<size_t>(ns));
      std::memcpy(s.tile[C][m], out, sizeof(out));
    }
    for (int m = rows; m < kTileMaxRows; ++m) std::memset(s.tile[C][m], 0, kTileMaxColsb);
  }

 private:
  template <int T>
  static void check_configured(const char* op) {
    static_assert(T >= 0 && T < kTiles, "tile number");
    const State& s = state();
    if (!s.configured) tile_fault("no tile configuration loaded (or released since)", op);
    if (s.cfg.rows[T] == 0) tile_fault("a tile that the configuration leaves out", op);
  }
};

}  // namespace
}  // namespace fastdec
