// int8 GEMM on AMX tiles, written once against a tile-ops layer (amx_tiles.h): the
// hardware instructions in isa_amx.cc, their emulation in isa_amx_emulated.cc.
//
// Sign convention: the VNNI table's, exactly. Activations are quantised to int8 and
// stored + 128 as unsigned bytes (VNNI's quantiser and row layout, round_up(K, 64) bytes
// per row); TDPBUSD multiplies them by the signed weights, and the epilogue removes
// 128 * sum_k w[n,k] (I8GemmArgs::b_shift_correction). The int32 sums are exact, and the
// epilogue is dequantize_one, so every output equals the scalar and VNNI paths' bit for bit.
//
// Packed weights: the VNNI layout of the weights zero-padded to Kp = round_up(K, 64),
// so that every K step is one whole B tile:
//
//   block b = output columns 16b .. 16b+15, K step s = k in [64s, 64s + 64):
//   the B tile at packed + (b * Kp / 64 + s) * 1024, 16 rows x 64 bytes, row stride 64:
//
//            bytes 0..3        4..7              60..63
//   row 0  [n0: k0 k1 k2 k3][n1: k0 .. k3] ... [n15: k0 .. k3]     (k relative to 64s)
//   row 1  [n0: k4 .. k7   ][n1: k4 .. k7] ... [n15: k4 .. k7]
//   ...
//   row 15 [n0: k60 .. k63 ] ...              [n15: k60 .. k63]
//
// Columns >= N and k >= K are zero (the buffer is zero-filled), so the padding adds 0
// whatever the activation rows hold there. Being VNNI's layout at K = Kp, the VNNI
// kernel runs on it unchanged (isa_amx.cc sends one-row calls there).
//
// Tiles: C (int32, 16 x 16) number 2i + j for row tile i, column tile j; A (activations,
// rows x 64 bytes) 4 + i; B (weights) 6 + j. Up to 32 rows x 32 columns per pass.
#pragma once
#include <algorithm>

#include "kernels/amx_tiles.h"
#include "kernels/isa_common.h"

namespace fastdec {
namespace {  // NOLINT(build/namespaces): per-TU copies are the point

constexpr int kAmxCols = 16;            // output columns per packed block (one B tile)
constexpr int kAmxKStep = 64;           // K values per B tile (16 rows of 4)
constexpr size_t kAmxTileBytes = 1024;  // one B tile, 16 x 64 bytes

inline size_t amx_k_padded(int K) { return round_up(static_cast<size_t>(K), kAmxKStep); }

size_t amx_packed_bytes(int N, int K) {
  return round_up(static_cast<size_t>(N), kAmxCols) * amx_k_padded(K);
}

void amx_pack(const int8_t* w, int N, int K, int8_t* packed) {
  const size_t block_bytes = amx_k_padded(K) * kAmxCols;
  for (int n = 0; n < N; ++n) {
    int8_t* col = packed + static_cast<size_t>(n / kAmxCols) * block_bytes + (n % kAmxCols) * 4;
    const int8_t* row = w + static_cast<size_t>(n) * K;
    for (int k = 0; k < K; ++k) col[(k / 4) * 64 + k % 4] = row[k];
  }
}

// Activation rows: VNNI's, padded to 64 bytes, so an A tile row never leaves its row.
inline size_t amx_a_row_bytes(int K) { return amx_k_padded(K); }

// Tiles for `rows` (1..32) rows: row tile 0 gets min(rows, 16), row tile 1 the rest.
TileConfig amx_tile_config(int rows) {
  const int r0 = std::min(rows, 16), r1 = rows - r0;
  TileConfig cfg;
  for (int i = 0; i < 2; ++i) {
    const int r = i == 0 ? r0 : r1;
    if (r == 0) continue;
    for (int t : {2 * i, 2 * i + 1, 4 + i}) {  // C tiles of row tile i and its A tile
      cfg.rows[t] = static_cast<uint8_t>(r);
      cfg.colsb[t] = 64;
    }
  }
  for (int t : {6, 7}) {  // B: 16 rows of 4 K values x 16 columns
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  return cfg;
}

// out[l] for the columns n0 .. n0 + cols of row m: the int32 sums of one C tile row,
// less the +128 shift, through the shared epilogue (isa_common.h). Two loops so that
// the compiler vectorises each without a per-element bias test.
inline void amx_epilogue_row(const I8GemmArgs& g, const int32_t* acc, int m, int n0, int cols) {
  float* out = g.c + m * g.c_stride + n0;
  const float ad = g.a_dequant[m];
  const int32_t* corr = g.b_shift_correction + n0;
  const float* bdq = g.b_dequant + n0;
  if (g.bias) {
    const float* bias = g.bias + n0;
    for (int l = 0; l < cols; ++l) out[l] = dequantize_one(acc[l] - corr[l], ad, bdq[l], bias[l], g.relu);
  } else {
    for (int l = 0; l < cols; ++l) out[l] = dequantize_one(acc[l] - corr[l], ad, bdq[l], 0.f, g.relu);
  }
}

// Rows [m0, m0 + rows) (rows <= 16 * MT, as configured) x blocks [block0, block0 + NT).
template <typename Ops, int MT, int NT>
void amx_pass(const I8GemmArgs& g, int m0, int rows, int block0, size_t k_steps) {
  constexpr int kAccCols = 32;  // int32 per row of the C staging buffer
  alignas(64) int32_t acc[32 * kAccCols];
  Ops::template zero<0>();
  if constexpr (NT > 1) Ops::template zero<1>();
  if constexpr (MT > 1) Ops::template zero<2>();
  if constexpr (MT > 1 && NT > 1) Ops::template zero<3>();
  const size_t as = g.a_stride;
  const uint8_t* a0 = g.a + m0 * as;
  const uint8_t* a1 = a0 + 16 * as;
  const int8_t* b0 = g.b + static_cast<size_t>(block0) * k_steps * kAmxTileBytes;
  const int8_t* b1 = b0 + k_steps * kAmxTileBytes;
  for (size_t s = 0; s < k_steps; ++s) {
    Ops::template load<4>(a0 + s * kAmxKStep, as);
    if constexpr (MT > 1) Ops::template load<5>(a1 + s * kAmxKStep, as);
    Ops::template load<6>(b0 + s * kAmxTileBytes, 64);
    if constexpr (NT > 1) Ops::template load<7>(b1 + s * kAmxTileBytes, 64);
    Ops::template dpbusd<0, 4, 6>();
    if constexpr (NT > 1) Ops::template dpbusd<1, 4, 7>();
    if constexpr (MT > 1) Ops::template dpbusd<2, 5, 6>();
    if constexpr (MT > 1 && NT > 1) Ops::template dpbusd<3, 5, 7>();
  }
  constexpr size_t stride = kAccCols * sizeof(int32_t);
  Ops::template store<0>(acc, stride);
  if constexpr (NT > 1) Ops::template store<1>(acc + 16, stride);
  if constexpr (MT > 1) Ops::template store<2>(acc + 16 * kAccCols, stride);
  if constexpr (MT > 1 && NT > 1) Ops::template store<3>(acc + 16 * kAccCols + 16, stride);
  for (int j = 0; j < NT; ++j) {
    const int n0 = (block0 + j) * kAmxCols;
    const int cols = std::min(kAmxCols, g.N - n0);
    for (int i = 0; i < rows; ++i) amx_epilogue_row(g, acc + i * kAccCols + j * 16, m0 + i, n0, cols);
  }
}

// Rows [m_begin, m_end) in groups of `group` (<= 32) rows, all with one tile shape,
// under column panels of two blocks: a panel's weights come into cache once and
// serve every row group.
template <typename Ops>
void amx_rows(const I8GemmArgs& g, int m_begin, int m_end, int group, int block_begin, int block_end,
              size_t k_steps) {
  for (int b = block_begin; b < block_end; b += 2) {
    const bool two = b + 1 < block_end;
    for (int m = m_begin; m < m_end; m += group) {
      if (group > 16)
        two ? amx_pass<Ops, 2, 2>(g, m, group, b, k_steps) : amx_pass<Ops, 2, 1>(g, m, group, b, k_steps);
      else
        two ? amx_pass<Ops, 1, 2>(g, m, group, b, k_steps) : amx_pass<Ops, 1, 1>(g, m, group, b, k_steps);
    }
  }
}

// The table's i8_gemm on tiles: whole 32-row groups under one tile configuration, then
// the remaining rows (1..31) under one more. LDTILECFG per call and TILERELEASE at the
// end: other code on this thread (oneDNN under torch, say) may configure tiles between
// our calls, and a released thread carries no tile state through context switches.
template <typename Ops>
void amx_gemm(const I8GemmArgs& g, int m_begin, int m_end, int block_begin, int block_end) {
  if (m_begin >= m_end || block_begin >= block_end) return;
  const size_t k_steps = amx_k_padded(g.K) / kAmxKStep;
  const int m_full = m_begin + (m_end - m_begin) / 32 * 32;
  if (m_full > m_begin) {
    Ops::config(amx_tile_config(32));
    amx_rows<Ops>(g, m_begin, m_full, 32, block_begin, block_end, k_steps);
  }
  if (m_full < m_end) {
    Ops::config(amx_tile_config(m_end - m_full));
    amx_rows<Ops>(g, m_full, m_end, m_end - m_full, block_begin, block_end, k_steps);
  }
  Ops::release();
}

}  // namespace
}  // namespace fastdec
