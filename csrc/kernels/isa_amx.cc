// AMX-INT8 kernels: the int8 GEMM on tiles (amx_gemm.h over the instructions), the
// rest of the table the VNNI one's. Activations, their quantiser and the shortlist's
// column kernel are VNNI's unchanged (the same shifted unsigned rows); only the packed
// weights differ (VNNI's layout with K padded to 64), and calls with few rows, where
// tiles do not pay, run VNNI's kernel on that layout.
#include "kernels/amx_gemm.h"

namespace fastdec {
namespace {

// Rows of one GEMM call below which VNNI's kernel runs instead of tiles. To be set from
// measurements on an AMX host (tools/device/amx_check.sh times both per shape); until
// then one-row calls (the greedy step at batch 1), which stream every weight once for
// one row, stay on VNNI and everything else goes to tiles.
constexpr int kAmxMinRows = 2;

void gemm_vnni(const I8GemmArgs& g, int m_begin, int m_end, int block_begin, int block_end) {
  static const auto vnni_gemm = kernels_vnni().i8_gemm;
  I8GemmArgs padded = g;
  padded.K = static_cast<int>(amx_k_padded(g.K));  // VNNI's layout at K = Kp (amx_gemm.h)
  vnni_gemm(padded, m_begin, m_end, block_begin, block_end);
}

void gemm(const I8GemmArgs& g, int m_begin, int m_end, int block_begin, int block_end) {
  if (m_end - m_begin < kAmxMinRows)
    gemm_vnni(g, m_begin, m_end, block_begin, block_end);
  else
    amx_gemm<TileOpsHw>(g, m_begin, m_end, block_begin, block_end);
}

KernelTable amx_table(const char* name, decltype(KernelTable::i8_gemm) gemm_fn) {
  KernelTable t = kernels_vnni();
  t.isa = Isa::kAmx;
  t.name = name;
  t.i8_cols_per_block = kAmxCols;
  t.i8_packed_bytes = amx_packed_bytes;
  t.i8_pack = amx_pack;
  t.i8_gemm = gemm_fn;
  return t;
}

}  // namespace

int amx_min_rows() { return kAmxMinRows; }

const KernelTable& kernels_amx() {
  static const KernelTable table = amx_table("amx", gemm);
  return table;
}

const KernelTable& kernels_amx_tiles() {
  static const KernelTable table = amx_table("amx-tiles", amx_gemm<TileOpsHw>);
  return table;
}

}  // namespace fastdec
