// The per-ISA kernel interface. Each isa_*.cc fills one KernelTable with functions
// compiled for that instruction set; dispatch.cc hands out the table for the running
// CPU. Packed layouts are private to a table: data packed by one table is only ever
// passed back to the same table (the packed objects remember which one packed them).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cpu_features.h"

namespace fastdec {

// Quantized activations: one row per token, a_row_bytes(K) bytes each.
// Packed weights: blocks of `i8_cols_per_block` output columns.
struct I8GemmArgs {
  int M = 0, N = 0, K = 0;
  const uint8_t* a = nullptr;       // quantized rows (this table's format)
  size_t a_stride = 0;              // bytes between rows
  const float* a_dequant = nullptr; // [M] 1 / activation scale of each row
  const int8_t* b = nullptr;        // packed weights (this table's format)
  const float* b_dequant = nullptr; // [N] weight scale: w ≈ int8 * b_dequant
  const int32_t* b_shift_correction = nullptr;  // [N] 128 * sum_k w[n,k] (VNNI shift)
  const float* bias = nullptr;      // [N] or null
  bool relu = false;
  float* c = nullptr;               // fp32 output rows
  size_t c_stride = 0;              // floats between rows
};

// Column subset: row m computes columns cols[offsets[m] .. offsets[m+1]) and writes
// them densely to c[offsets[m] ..]. Weights are the row-major [N][i8_rows_k(K)] copy.
struct I8ColumnsArgs {
  int M = 0, K = 0;
  const uint8_t* a = nullptr;
  size_t a_stride = 0;
  const float* a_dequant = nullptr;
  const int8_t* b_rows = nullptr;   // [N][b_row_stride] int8, zero padded
  size_t b_row_stride = 0;
  const float* b_dequant = nullptr;
  const int32_t* b_shift_correction = nullptr;
  const float* bias = nullptr;
  const int32_t* cols = nullptr;
  const int64_t* offsets = nullptr;  // [M + 1]
  float* c = nullptr;
};

// fp32 C[M,N] = A[M,K] · W[N,K]^T (+ bias, relu) with W packed in column blocks.
struct F32GemmArgs {
  int M = 0, N = 0, K = 0;
  const float* a = nullptr;
  size_t a_stride = 0;
  const float* b = nullptr;  // packed
  const float* bias = nullptr;
  bool relu = false;
  float* c = nullptr;
  size_t c_stride = 0;
};

// One row's statistics for decoding: max, log-sum-exp, top-k (value desc, index asc).
struct RowStats {
  float max = 0.f;
  float log_sum_exp = 0.f;  // log(sum exp(x)), so log p(i) = x[i] - log_sum_exp
};

struct KernelTable {
  Isa isa;
  const char* name;

  // ---- int8 GEMM (weights int8 [N,K], activations quantized at run time) ----
  int i8_cols_per_block;
  size_t (*i8_packed_bytes)(int N, int K);
  void (*i8_pack)(const int8_t* w, int N, int K, int8_t* packed);
  size_t (*i8_a_row_bytes)(int K);
  // Quantize rows of A. scale_fixed: null -> per-row 127 / max|a_row| (dynamic),
  // else a calibrated scale for all rows; values are rounded and clamped to ±127.
  void (*i8_quantize)(const float* a, int M, int K, size_t lda, const float* scale_fixed,
                      uint8_t* out, size_t out_stride, float* a_dequant);
  void (*i8_gemm)(const I8GemmArgs& args, int m_begin, int m_end, int block_begin,
                  int block_end);
  void (*i8_gemm_columns)(const I8ColumnsArgs& args, int m_begin, int m_end);

  // ---- fp32 GEMM ----
  int f32_cols_per_block;
  size_t (*f32_packed_floats)(int N, int K);
  void (*f32_pack)(const float* w, int N, int K, float* packed);
  void (*f32_gemm)(const F32GemmArgs& args, int m_begin, int m_end, int block_begin,
                   int block_end);
  // Small strided GEMM for attention: C = alpha · A[M,K] · op(B) (+ C if accumulate),
  // op(B) = B[K,N] (ldb between rows of K) or, with b_transposed, B[N,K]^T.
  void (*f32_small_gemm)(int M, int N, int K, float alpha, const float* a, size_t lda,
                         const float* b, size_t ldb, bool b_transposed, float* c,
                         size_t ldc, bool accumulate);

  // ---- layer normalisation: y = (x - mean) / sqrt(var + eps) * gamma + beta per row
  // of d values (two passes: mean, then variance of the centred values). y may be x.
  void (*layer_norm)(const float* x, int rows, int d, const float* gamma, const float* beta,
                     float* y, float eps);
  // Residual and layer norm in one pass over each row: x += y, then out = layer_norm(x)
  // (out may be x). The same numbers as the add followed by layer_norm.
  void (*add_layer_norm)(float* x, const float* y, int rows, int d, const float* gamma,
                         const float* beta, float* out, float eps);

  // ---- attention softmax, in place: row r of x (rows `stride` floats apart) becomes
  // softmax(x[r, :visible[r]]) followed by zeros up to n; visible[r] >= 1.
  void (*softmax_rows)(float* x, int rows, int n, size_t stride, const int* visible);

  // ---- rows of scores ----
  // Index of the maximum; ties -> lowest index; NaN never wins unless all are NaN
  // (then 0). n >= 1.
  int64_t (*argmax)(const float* x, int64_t n);
  // Two passes: max, then sum of exp and top-k. top_ids/top_values hold k entries
  // sorted by value desc, index asc (k <= n; NaN entries never enter).
  RowStats (*row_stats)(const float* x, int64_t n, int k, int64_t* top_ids,
                        float* top_values);
};

const KernelTable& kernels_scalar();
const KernelTable& kernels_avx2();
const KernelTable& kernels_avx512();
const KernelTable& kernels_vnni();
// AMX (dispatch.cc, from isa_amx.cc's pieces): VNNI's table with the int8 GEMM on tiles
// from amx_min_rows() rows per call (VNNI's kernel below, on the same packed weights)
// and its own packed layout (amx_gemm.h).
const KernelTable& kernels_amx();
int amx_min_rows();
// The AMX table with tiles at every row count, to measure where tiles pay (bench).
const KernelTable& kernels_amx_tiles();
// What isa_amx.cc contributes to those two tables.
struct AmxInt8Kernels {
  int cols_per_block;
  size_t (*packed_bytes)(int N, int K);
  void (*pack)(const int8_t* w, int N, int K, int8_t* packed);
  void (*gemm)(const I8GemmArgs& args, int m_begin, int m_end, int block_begin, int block_end);
  void (*gemm_tiles)(const I8GemmArgs& args, int m_begin, int m_end, int block_begin, int block_end);
  int min_rows;  // kAmxMinRows: gemm runs VNNI's kernel on calls of fewer rows
};
const AmxInt8Kernels& amx_int8_kernels();
// The AMX GEMM on emulated tiles (isa_amx_emulated.cc): runs on any CPU, for tests.
const KernelTable& kernels_amx_emulated();

}  // namespace fastdec
