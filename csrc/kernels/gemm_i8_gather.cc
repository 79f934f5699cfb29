// I8Matrix::gathered: a column subset of an int8 matrix, packed as a matrix of its own
// (the shortlisted output layer's union GEMM; see gemm_i8.h).
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/gemm_i8.h"

namespace fastdec {

std::unique_ptr<I8Matrix> I8Matrix::gathered(const I8Matrix& full, const int32_t* cols, int count,
                                             ThreadPool* pool) {
  if (!full.has_rows()) throw std::invalid_argument("I8Matrix::gathered: matrix packed without rows");
  if (count < 1) throw std::invalid_argument("I8Matrix::gathered: need at least one column");
  const KernelTable& kt = *full.kernels_;
  const int K = full.K_;
  std::unique_ptr<I8Matrix> g(new I8Matrix(kt, count, K));
  g->packed_.resize(kt.i8_packed_bytes(count, K));  // zero-filled: K padding reads as 0
  g->dequant_.resize(static_cast<size_t>(count));
  g->shift_correction_.resize(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    g->dequant_.data()[i] = full.dequant_.data()[cols[i]];
    g->shift_correction_.data()[i] = full.shift_correction_.data()[cols[i]];
  }
  // Every table packs whole blocks of i8_cols_per_block columns one after another, block
  // b starting at i8_packed_bytes(b * cols_per_block, K): chunks of whole blocks pack
  // independently, so threads pack disjoint chunks.
  const int per_block = kt.i8_cols_per_block;
  const int blocks = (count + per_block - 1) / per_block;
  const size_t stride = round_up(static_cast<size_t>(K), 64);
  const int tasks = pool ? std::min(pool->size(), blocks) : 1;
  auto pack_chunk = [&](int t) {
    int b0, b1;
    split_range(blocks, tasks, t, &b0, &b1);
    const int n0 = b0 * per_block, n1 = std::min(count, b1 * per_block);
    if (n1 <= n0) return;
    thread_local std::vector<int8_t> rows;
    rows.resize(static_cast<size_t>(n1 - n0) * K);
    for (int n = n0; n < n1; ++n)
      std::memcpy(rows.data() + static_cast<size_t>(n - n0) * K, full.rows_.data() + cols[n] * stride,
                  static_cast<size_t>(K));
    kt.i8_pack(rows.data(), n1 - n0, K, g->packed_.data() + kt.i8_packed_bytes(n0, K));
  };
  if (tasks <= 1)
    pack_chunk(0);
  else
    pool->parallel_for(tasks, pack_chunk);
  return g;
}

}  // namespace fastdec
