// Portable kernels: the reference every SIMD path must match, and the fallback for
// CPUs without AVX2. Compiled without -m flags.
#include <algorithm>

#include "kernels/isa_common.h"

namespace fastdec {
namespace {

// int8: activations are signed bytes, weights row-major [N][round_up(K, 64)].
size_t i8_row_bytes(int K) { return round_up(static_cast<size_t>(K), 64); }

size_t i8_packed_bytes(int N, int K) { return static_cast<size_t>(N) * i8_row_bytes(K); }

void i8_pack(const int8_t* w, int N, int K, int8_t* packed) {
  size_t stride = i8_row_bytes(K);
  for (int n = 0; n < N; ++n)
    std::memcpy(packed + n * stride, w + static_cast<size_t>(n) * K, static_cast<size_t>(K));
}

void i8_quantize(const float* a, int M, int K, size_t lda, const float* scale_fixed,
                 uint8_t* out, size_t out_stride, float* a_dequant) {
  for (int m = 0; m < M; ++m) {
    const float* row = a + m * lda;
    float scale;
    if (scale_fixed) {
      scale = *scale_fixed;
    } else {
      float max_abs = 0.f;
      for (int k = 0; k < K; ++k) max_abs = std::max(max_abs, std::fabs(row[k]));
      scale = activation_scale(max_abs);
    }
    a_dequant[m] = 1.f / scale;
    auto* q = reinterpret_cast<int8_t*>(out + m * out_stride);
    for (int k = 0; k < K; ++k) q[k] = quantize_one(row[k], scale);
  }
}

int32_t dot_i8(const int8_t* a, const int8_t* b, int K) {
  int32_t acc = 0;
  for (int k = 0; k < K; ++k) acc += int32_t{a[k]} * int32_t{b[k]};
  return acc;
}

void i8_gemm(const I8GemmArgs& g, int m_begin, int m_end, int block_begin, int block_end) {
  size_t stride = i8_row_bytes(g.K);
  for (int m = m_begin; m < m_end; ++m) {
    auto* a = reinterpret_cast<const int8_t*>(g.a + m * g.a_stride);
    float* c = g.c + m * g.c_stride;
    for (int n = block_begin; n < block_end; ++n) {
      int32_t acc = dot_i8(a, g.b + n * stride, g.K);
      c[n] = dequantize_one(acc, g.a_dequant[m], g.b_dequant[n], g.bias ? g.bias[n] : 0.f,
                            g.relu);
    }
  }
}

void i8_gemm_columns(const I8ColumnsArgs& g, int m_begin, int m_end) {
  for (int m = m_begin; m < m_end; ++m) {
    auto* a = reinterpret_cast<const int8_t*>(g.a + m * g.a_stride);
    for (int64_t j = g.offsets[m]; j < g.offsets[m + 1]; ++j) {
      int n = g.cols[j];
      int32_t acc = dot_i8(a, g.b_rows + n * g.b_row_stride, g.K);
      g.c[j] = dequantize_one(acc, g.a_dequant[m], g.b_dequant[n], g.bias ? g.bias[n] : 0.f,
                              false);
    }
  }
}

// fp32: weights stay row-major [N][K]; each output is a dot product.
size_t f32_packed_floats(int N, int K) { return static_cast<size_t>(N) * K; }

void f32_pack(const float* w, int N, int K, float* packed) {
  std::memcpy(packed, w, sizeof(float) * static_cast<size_t>(N) * K);
}

void f32_gemm(const F32GemmArgs& g, int m_begin, int m_end, int block_begin, int block_end) {
  for (int m = m_begin; m < m_end; ++m) {
    const float* a = g.a + m * g.a_stride;
    float* c = g.c + m * g.c_stride;
    for (int n = block_begin; n < block_end; ++n) {
      const float* b = g.b + static_cast<size_t>(n) * g.K;
      float acc = 0.f;
      for (int k = 0; k < g.K; ++k) acc += a[k] * b[k];
      if (g.bias) acc += g.bias[n];
      c[n] = g.relu && acc < 0.f ? 0.f : acc;
    }
  }
}

void f32_small_gemm(int M, int N, int K, float alpha, const float* a, size_t lda,
                    const float* b, size_t ldb, bool b_transposed, float* c, size_t ldc,
                    bool accumulate) {
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      float acc = 0.f;
      for (int k = 0; k < K; ++k)
        acc += a[m * lda + k] * (b_transposed ? b[n * ldb + k] : b[k * ldb + n]);
      c[m * ldc + n] = alpha * acc + (accumulate ? c[m * ldc + n] : 0.f);
    }
  }
}

void layer_norm(const float* x, int rows, int d, const float* gamma, const float* beta, float* y,
                float eps) {
  for (int r = 0; r < rows; ++r) {
    const float* in = x + static_cast<size_t>(r) * d;
    float* out = y + static_cast<size_t>(r) * d;
    float mean = 0.f;
    for (int i = 0; i < d; ++i) mean += in[i];
    mean /= static_cast<float>(d);
    float var = 0.f;
    for (int i = 0; i < d; ++i) var += (in[i] - mean) * (in[i] - mean);
    float inv = 1.f / std::sqrt(var / static_cast<float>(d) + eps);
    for (int i = 0; i < d; ++i) out[i] = (in[i] - mean) * inv * gamma[i] + beta[i];
  }
}

void softmax_rows(float* x, int rows, int n, size_t stride, const int* visible) {
  for (int r = 0; r < rows; ++r) {
    float* row = x + static_cast<size_t>(r) * stride;
    int seen = std::min(visible[r], n);
    float mx = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < seen; ++j) mx = std::max(mx, row[j]);
    float sum = 0.f;
    for (int j = 0; j < seen; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += row[j];
    }
    float inv = 1.f / sum;
    for (int j = 0; j < seen; ++j) row[j] *= inv;
    std::fill(row + seen, row + n, 0.f);
  }
}

int64_t argmax(const float* x, int64_t n) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i)
    if (x[i] > -std::numeric_limits<float>::infinity() && (best < 0 || x[i] > x[best]))
      best = i;
  return best >= 0 ? best : argmax_without_finite_max(x, n);
}

RowStats row_stats(const float* x, int64_t n, int k, int64_t* top_ids, float* top_values) {
  RowStats s;
  s.max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) s.max = x[i] > s.max ? x[i] : s.max;  // NaN skipped
  TopK top{k, 0, top_ids, top_values};
  if (!(s.max > -std::numeric_limits<float>::infinity())) {  // only -inf and NaN
    top.fill_from(x, n);
    s.log_sum_exp = s.max;
    return s;
  }
  double sum = 0.0;  // one serial accumulator: double keeps 32k terms accurate
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) continue;  // NaN is ignored, as argmax ignores it
    sum += static_cast<double>(std::exp(x[i] - s.max));
    top.offer(x[i], i);
  }
  if (top.count < k) top.fill_from(x, n);
  s.log_sum_exp = s.max + static_cast<float>(std::log(sum));
  return s;
}

}  // namespace

const KernelTable& kernels_scalar() {
  static const KernelTable table = {
      Isa::kScalar, "scalar",
      1, i8_packed_bytes, i8_pack, i8_row_bytes, i8_quantize, i8_gemm, i8_gemm_columns,
      1, f32_packed_floats, f32_pack, f32_gemm, f32_small_gemm,
      layer_norm, add_layer_norm_rows<layer_norm>, softmax_rows, argmax, row_stats};
  return table;
}

}  // namespace fastdec
