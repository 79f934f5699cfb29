#include "kernels/gemm_i8.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "kernels/op_profile.h"

namespace fastdec {
namespace {

struct QuantizedA {
  const uint8_t* data;
  size_t stride;
  const float* dequant;
};

QuantizedA quantize_activations(const KernelTable& kt, const float* a, int M, int K,
                                size_t lda, const float* act_scale, I8Scratch* owned) {
  // Quantisation runs on the calling thread, before the GEMM is split.
  OpTimer timer(Op::kQuantize);
  thread_local I8Scratch per_thread;
  I8Scratch& scratch = owned ? *owned : per_thread;
  size_t stride = kt.i8_a_row_bytes(K);
  uint8_t* rows = scratch.rows.reserve_scratch(stride * static_cast<size_t>(M));
  float* dequant = scratch.dequant.reserve_scratch(static_cast<size_t>(M));
  kt.i8_quantize(a, M, K, lda, act_scale, rows, stride, dequant);
  return {rows, stride, dequant};
}

}  // namespace

I8Matrix::I8Matrix(const KernelTable& kernels, const int8_t* w, int N, int K,
                   const float* scales, bool per_channel, bool keep_rows)
    : kernels_(&kernels), N_(N), K_(K) {
  if (N < 1 || K < 1) throw std::invalid_argument("I8Matrix: N and K must be >= 1");
  packed_.resize(kernels.i8_packed_bytes(N, K));
  kernels.i8_pack(w, N, K, packed_.data());
  dequant_.resize(static_cast<size_t>(N));
  shift_correction_.resize(static_cast<size_t>(N));
  for (int n = 0; n < N; ++n) {
    dequant_.data()[n] = per_channel ? scales[n] : scales[0];
    int32_t sum = 0;
    for (int k = 0; k < K; ++k) sum += w[static_cast<size_t>(n) * K + k];
    shift_correction_.data()[n] = 128 * sum;
  }
  if (keep_rows) {
    size_t stride = round_up(static_cast<size_t>(K), 64);
    rows_.resize(stride * static_cast<size_t>(N));
    for (int n = 0; n < N; ++n)
      std::memcpy(rows_.data() + n * stride, w + static_cast<size_t>(n) * K, static_cast<size_t>(K));
  }
}

void gemm_i8(const I8Matrix& w, const float* a, int M, size_t lda, const float* act_scale,
             const float* bias, bool relu, float* c, size_t ldc, ThreadPool* pool, I8Scratch* scratch) {
  if (M <= 0) return;
  const KernelTable& kt = *w.kernels_;
  QuantizedA q = quantize_activations(kt, a, M, w.K_, lda, act_scale, scratch);
  I8GemmArgs args;
  args.M = M;
  args.N = w.N_;
  args.K = w.K_;
  args.a = q.data;
  args.a_stride = q.stride;
  args.a_dequant = q.dequant;
  args.b = w.packed_.data();
  args.b_dequant = w.dequant_.data();
  args.b_shift_correction = w.shift_correction_.data();
  args.bias = bias;
  args.relu = relu;
  args.c = c;
  args.c_stride = ldc;
  int blocks = (w.N_ + kt.i8_cols_per_block - 1) / kt.i8_cols_per_block;
  parallel_gemm(pool, M, blocks, [&](int m0, int m1, int b0, int b1) { kt.i8_gemm(args, m0, m1, b0, b1); });
}

void gemm_i8_columns(const I8Matrix& w, const float* a, int M, size_t lda,
                     const float* act_scale, const int32_t* cols, const int64_t* offsets,
                     const float* bias, float* c, ThreadPool* pool, I8Scratch* scratch) {
  if (M <= 0) return;
  if (!w.has_rows()) throw std::invalid_argument("gemm_i8_columns: matrix packed without rows");
  const KernelTable& kt = *w.kernels_;
  QuantizedA q = quantize_activations(kt, a, M, w.K_, lda, act_scale, scratch);
  I8ColumnsArgs args;
  args.M = M;
  args.K = w.K_;
  args.a = q.data;
  args.a_stride = q.stride;
  args.a_dequant = q.dequant;
  args.b_rows = w.rows_.data();
  args.b_row_stride = round_up(static_cast<size_t>(w.K_), 64);
  args.b_dequant = w.dequant_.data();
  args.b_shift_correction = w.shift_correction_.data();
  args.bias = bias;
  args.cols = cols;
  args.offsets = offsets;
  args.c = c;
  // Rows are independent (each has its own column list), so they split like any row loop;
  // each thread gets one contiguous range, so the kernel sees consecutive rows that share
  // a column list (the positions of one verified row) together.
  int threads = pool ? std::min(pool->size(), M) : 1;
  parallel_rows(pool, threads, [&](int t) {
    int begin, end;
    split_range(M, threads, t, &begin, &end);
    kt.i8_gemm_columns(args, begin, end);
  });
}

}  // namespace fastdec
