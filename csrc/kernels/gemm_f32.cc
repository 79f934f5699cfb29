#include "kernels/gemm_f32.h"

#include <stdexcept>

namespace fastdec {

F32Matrix::F32Matrix(const KernelTable& kernels, const float* w, int N, int K)
    : kernels_(&kernels), N_(N), K_(K) {
  if (N < 1 || K < 1) throw std::invalid_argument("F32Matrix: N and K must be >= 1");
  packed_.resize(kernels.f32_packed_floats(N, K));
  kernels.f32_pack(w, N, K, packed_.data());
}

void gemm_f32(const F32Matrix& w, const float* a, int M, size_t lda, const float* bias,
              bool relu, float* c, size_t ldc, ThreadPool* pool) {
  if (M <= 0) return;
  const KernelTable& kt = *w.kernels_;
  F32GemmArgs args;
  args.M = M;
  args.N = w.N_;
  args.K = w.K_;
  args.a = a;
  args.a_stride = lda;
  args.b = w.packed_.data();
  args.bias = bias;
  args.relu = relu;
  args.c = c;
  args.c_stride = ldc;
  int blocks = (w.N_ + kt.f32_cols_per_block - 1) / kt.f32_cols_per_block;
  parallel_gemm(pool, M, blocks, [&](int m0, int m1, int b0, int b1) { kt.f32_gemm(args, m0, m1, b0, b1); });
}

}  // namespace fastdec
