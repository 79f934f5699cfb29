// The AMX table on emulated tiles (amx_gemm.h over TileOpsEmu), compiled with the
// baseline flags only: the same GEMM code as isa_amx.cc, run on any x86-64 CPU, so that
// the tile kernel (configuration, packing, K steps, row and column remainders, the
// epilogue) is tested bit for bit where no AMX exists. Its other pieces are portable
// equivalents of the VNNI ones the AMX table uses: the scalar quantiser's values stored
// + 128, and a scalar column kernel on those shifted rows. Not a kernel to run models
// with: every tile product is a scalar loop.
#include <algorithm>

#include "kernels/amx_gemm.h"

namespace fastdec {
namespace {

// The scalar quantiser's int8 values as unsigned bytes + 128 (VNNI's row format).
void quantize_shifted(const float* a, int M, int K, size_t lda, const float* scale_fixed,
                      uint8_t* out, size_t out_stride, float* a_dequant) {
  kernels_scalar().i8_quantize(a, M, K, lda, scale_fixed, out, out_stride, a_dequant);
  for (int m = 0; m < M; ++m) {
    uint8_t* row = out + m * out_stride;
    for (int k = 0; k < K; ++k) row[k] = static_cast<uint8_t>(row[k] ^ 0x80u);
  }
}

void gemm_columns_shifted(const I8ColumnsArgs& g, int m_begin, int m_end) {
  for (int m = m_begin; m < m_end; ++m) {
    const uint8_t* a = g.a + m * g.a_stride;
    for (int64_t j = g.offsets[m]; j < g.offsets[m + 1]; ++j) {
      const int n = g.cols[j];
      const int8_t* w = g.b_rows + n * g.b_row_stride;
      int32_t acc = 0;
      for (int k = 0; k < g.K; ++k) acc += int32_t{a[k]} * int32_t{w[k]};
      g.c[j] = dequantize_one(acc - g.b_shift_correction[n], g.a_dequant[m], g.b_dequant[n],
                              g.bias ? g.bias[n] : 0.f, false);
    }
  }
}

}  // namespace

const KernelTable& kernels_amx_emulated() {
  static const KernelTable table = [] {
    KernelTable t = kernels_scalar();
    t.isa = Isa::kAmx;
    t.name = "amx-emulated";
    t.i8_cols_per_block = kAmxCols;
    t.i8_packed_bytes = amx_packed_bytes;
    t.i8_pack = amx_pack;
    t.i8_a_row_bytes = amx_a_row_bytes;
    t.i8_quantize = quantize_shifted;
    t.i8_gemm = amx_gemm<TileOpsEmu>;
    t.i8_gemm_columns = gemm_columns_shifted;
    return t;
  }();
  return table;
}

}  // namespace fastdec
