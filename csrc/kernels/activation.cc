#include "kernels/activation.h"

#include <cmath>

namespace fastdec {

void apply_activation(Activation act, float* x, int rows, int cols, ThreadPool* pool) {
  if (act == Activation::kRelu) {  // callers fuse it into the GEMM; kept for completeness
    for (size_t i = 0, n = static_cast<size_t>(rows) * cols; i < n; ++i) x[i] = x[i] > 0.f ? x[i] : 0.f;
    return;
  }
  parallel_rows(pool, rows, [&](int r) {
    float* row = x + static_cast<size_t>(r) * cols;
    if (act == Activation::kSwish) {
      // x / (1 + exp(-x)): exp(-x) overflows to inf for x < -88, giving -0, as torch does.
      for (int i = 0; i < cols; ++i) row[i] = row[i] / (1.f + std::exp(-row[i]));
    } else {
      constexpr float kInvSqrt2 = 0.70710678118654752f;
      for (int i = 0; i < cols; ++i) row[i] = 0.5f * row[i] * (1.f + std::erf(row[i] * kInvSqrt2));
    }
  });
}

}  // namespace fastdec
