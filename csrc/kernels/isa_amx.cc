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

}  // namespace

// Constant-initialised (function addresses only), so no code of this AVX-512 unit runs
// until a CPU with AMX calls into it; dispatch.cc assembles the tables (kernels_amx).
const AmxInt8Kernels& amx_int8_kernels() {
  static const AmxInt8Kernels kernels = {kAmxCols, amx_packed_bytes, amx_pack, gemm, amx_gemm<TileOpsHw>,
                                         kAmxMinRows};
  return kernels;
}

}  // namespace fastdec
