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
    kt.softmax_rows(scores, n_q, n_kv, static_cast<size_t>(n_kv), visible);
    kt.f32_small_gemm(n_q, shape.head_dim, n_kv, 1.f, scores, static_cast<size_t>(n_kv), v + col,
                      kv_stride, /*b_transposed=*/false, out + col, out_stride, false);
  }
}

}  // namespace fastdec
