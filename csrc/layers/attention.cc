#include "layers/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fastdec {

void attend(const KernelTable& kt, AttentionShape shape, const float* q, size_t q_stride, int n_q,
            const float* k, const float* v, size_t kv_stride, int n_kv, const int* visible,
            float* out, size_t out_stride, std::vector<float>& scratch) {
  scratch.resize(static_cast<size_t>(n_q) * n_kv);
  float* scores = scratch.data();
  const float scale = 1.f / std::sqrt(static_cast<float>(shape.head_dim));
  for (int h = 0; h < shape.heads; ++h) {
    size_t col = static_cast<size_t>(h) * shape.head_dim;
    kt.f32_small_gemm(n_q, n_kv, shape.head_dim, scale, q + col, q_stride, k + col, kv_stride,
                      /*b_transposed=*/true, scores, static_cast<size_t>(n_kv), false);
    for (int i = 0; i < n_q; ++i) {
      float* row = scores + static_cast<size_t>(i) * n_kv;
      int seen = std::min(visible[i], n_kv);
      float mx = -std::numeric_limits<float>::infinity();
      for (int j = 0; j < seen; ++j) mx = std::max(mx, row[j]);
      float sum = 0.f;
      for (int j = 0; j < seen; ++j) {
        row[j] = std::exp(row[j] - mx);
        sum += row[j];
      }
      float inv = 1.f / sum;
      for (int j = 0; j < seen; ++j) row[j] *= inv;
      std::fill(row + seen, row + n_kv, 0.f);
    }
    kt.f32_small_gemm(n_q, shape.head_dim, n_kv, 1.f, scores, static_cast<size_t>(n_kv), v + col,
                      kv_stride, /*b_transposed=*/false, out + col, out_stride, false);
  }
}

}  // namespace fastdec
