// fp32 GEMM with weights packed for the running ISA (C = A · W^T + bias, ReLU), and
// small strided GEMMs for attention (scores Q·K^T and weighted sums P·V).
#pragma once
#include <cstddef>

#include "kernels/aligned.h"
#include "kernels/kernel_table.h"
#include "kernels/thread_pool.h"

namespace fastdec {

class F32Matrix {
 public:
  // w: float [N,K] row-major.
  F32Matrix(const KernelTable& kernels, const float* w, int N, int K);
  int rows() const { return N_; }
  int cols() const { return K_; }
  const KernelTable& kernels() const { return *kernels_; }

 private:
  friend void gemm_f32(const F32Matrix&, const float*, int, size_t, const float*, bool, float*,
                       size_t, ThreadPool*);
  const KernelTable* kernels_;
  int N_, K_;
  AlignedBuffer<float> packed_;
};

void gemm_f32(const F32Matrix& w, const float* a, int M, size_t lda, const float* bias,
              bool relu, float* c, size_t ldc, ThreadPool* pool);

}  // namespace fastdec
