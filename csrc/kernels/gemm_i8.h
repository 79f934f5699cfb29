// int8 GEMM, intgemm style: C[M,N] = dequant(quant(A[M,K]) · W[N,K]^T) + bias (+ReLU).
// Weights are stored ISA-independent (int8 [N,K] + per-output-channel or per-tensor
// scales) and packed for the running ISA here; activations are quantised per call,
// per row dynamically or with a calibrated scale. Any M, N, K >= 1.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/aligned.h"
#include "kernels/kernel_table.h"
#include "kernels/thread_pool.h"

namespace fastdec {

// Quantised activations of a call, reused across calls: it grows to the largest M seen.
// Owned by whoever runs the GEMMs (a model, which can then account for and free it).
struct I8Scratch {
  AlignedBuffer<uint8_t> rows;
  AlignedBuffer<float> dequant;
  size_t bytes() const { return rows.size() + dequant.size() * sizeof(float); }
};

class I8Matrix {
 public:
  // w: int8 [N,K] row-major, values in [-127, 127]. scales: N floats (per output
  // channel) or 1 float (per tensor); weight ≈ w * scale. keep_rows keeps a row-major
  // copy for gemm_i8_columns (the shortlisted output layer).
  I8Matrix(const KernelTable& kernels, const int8_t* w, int N, int K, const float* scales,
           bool per_channel, bool keep_rows);

  // The rows cols[0 .. count) of a matrix kept with rows (ids in [0, N), any order), as a
  // matrix of their own packed for the same table: the same int8 rows, scales and shift
  // corrections, so gemm_i8 over it gives for column i exactly gemm_i8_columns' value of
  // column cols[i] (same int32 dot product, same epilogue). The shortlisted output layer
  // at batch > 1 runs one GEMM over the union of its rows' lists this way
  // (gemm_i8_gather.cc). Packing is split over the pool in whole packed blocks.
  static std::unique_ptr<I8Matrix> gathered(const I8Matrix& full, const int32_t* cols, int count,
                                            ThreadPool* pool);

  int rows() const { return N_; }  // N: output columns of the GEMM
  int cols() const { return K_; }  // K
  bool has_rows() const { return rows_.size() != 0; }
  const KernelTable& kernels() const { return *kernels_; }

 private:
  I8Matrix(const KernelTable& kernels, int N, int K) : kernels_(&kernels), N_(N), K_(K) {}
  friend void gemm_i8(const I8Matrix&, const float*, int, size_t, const float*, const float*,
                      bool, float*, size_t, ThreadPool*, I8Scratch*);
  friend void gemm_i8_columns(const I8Matrix&, const float*, int, size_t, const float*,
                              const int32_t*, const int64_t*, const float*, float*, ThreadPool*,
                              I8Scratch*);
  const KernelTable* kernels_;
  int N_, K_;
  AlignedBuffer<int8_t> packed_;
  AlignedBuffer<int8_t> rows_;        // [N][round_up(K, 64)] or empty
  AlignedBuffer<float> dequant_;      // [N]
  AlignedBuffer<int32_t> shift_correction_;  // [N]: 128 * row sums (VNNI's +128 shift)
};

// act_scale: null -> dynamic per-row 127/max|a|; else the calibrated scale.
// scratch: null -> one kept per calling thread.
void gemm_i8(const I8Matrix& w, const float* a, int M, size_t lda, const float* act_scale,
             const float* bias, bool relu, float* c, size_t ldc, ThreadPool* pool,
             I8Scratch* scratch = nullptr);

// Row m computes only columns cols[offsets[m] .. offsets[m+1]) of W, written densely to
// c[offsets[m] ..]. Requires keep_rows. Column ids must be in [0, N) (checked by callers).
void gemm_i8_columns(const I8Matrix& w, const float* a, int M, size_t lda,
                     const float* act_scale, const int32_t* cols, const int64_t* offsets,
                     const float* bias, float* c, ThreadPool* pool, I8Scratch* scratch = nullptr);

}  // namespace fastdec
