#include "layers/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace fastdec {
namespace {

// The scores of the row being attended, per worker thread.
thread_local std::vector<float> attention_scratch;

}  // namespace

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

void attend_within(const KernelTable& kt, AttentionShape shape, const float* qkv, int len, float* out) {
  const size_t inner = static_cast<size_t>(shape.heads) * shape.head_dim;
  std::vector<int> visible(static_cast<size_t>(len), len);
  attend(kt, shape, qkv, 3 * inner, len, qkv + inner, qkv + 2 * inner, 3 * inner, len, visible.data(), out,
         inner, attention_scratch);
}

void append_kv(const float* qkv, int n, int start, int inner, float* k_cache, float* v_cache) {
  for (int i = 0; i < n; ++i) {
    std::memcpy(k_cache + static_cast<size_t>(start + i) * inner, qkv + static_cast<size_t>(i) * 3 * inner + inner,
                sizeof(float) * inner);
    std::memcpy(v_cache + static_cast<size_t>(start + i) * inner,
                qkv + static_cast<size_t>(i) * 3 * inner + 2 * inner, sizeof(float) * inner);
  }
}

void attend_cached(const KernelTable& kt, AttentionShape shape, const float* qkv, int n, int start, int open,
                   const float* k_cache, const float* v_cache, float* out) {
  const size_t inner = static_cast<size_t>(shape.heads) * shape.head_dim;
  const int total = start + n;
  std::vector<int> visible(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) visible[i] = i >= n - open ? total : start + i + 1;
  attend(kt, shape, qkv, 3 * inner, n, k_cache, v_cache, inner, total, visible.data(), out, inner,
         attention_scratch);
}

void attend_source(const KernelTable& kt, AttentionShape shape, const float* q, int n, const float* kv,
                   int source_len, float* out) {
  const size_t inner = static_cast<size_t>(shape.heads) * shape.head_dim;
  std::vector<int> visible(static_cast<size_t>(n), source_len);
  attend(kt, shape, q, inner, n, kv, kv + inner, 2 * inner, source_len, visible.data(), out, inner,
         attention_scratch);
}

}  // namespace fastdec
