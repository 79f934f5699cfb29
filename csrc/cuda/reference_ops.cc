// The plain C++ float32 implementation of ops.h: "device" memory is host memory and every
// op is a loop, written for clarity, not speed. It exists so that the GPU model's
// orchestration (gpu_model.cc) runs, and is tested, on machines without a GPU; the CUDA
// ops (cuda_ops.cu) are checked against it op by op on the device
// (tests/test_cuda_gpu.py, test_cuda_ops_against_the_reference_ops).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "cuda/ops.h"

namespace fastdec {
namespace gpu {
namespace {

class ReferenceOps final : public Ops {
 public:
  std::string name() const override { return "reference"; }

  DevPtr alloc(size_t bytes) override {
    // 64-byte aligned, never null (a zero-size tensor still has an address).
    void* p = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
    if (!p) throw std::bad_alloc();
    return DevPtr(p, [](void* q) { std::free(q); });
  }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void copy_rows(float* dst, size_t dst_pitch, const float* src, size_t src_pitch, size_t width,
                 size_t count) override {
    for (size_t r = 0; r < count; ++r) std::memmove(dst + r * dst_pitch, src + r * src_pitch, width * sizeof(float));
  }
  void gather_rows(const float* src, size_t width, const int32_t* index, int count, float* dst) override {
    for (int i = 0; i < count; ++i)
      std::memcpy(dst + static_cast<size_t>(i) * width, src + static_cast<size_t>(index[i]) * width,
                  width * sizeof(float));
  }

  // Stored transposed, [in, out]: the product below then runs along contiguous outputs,
  // which the compiler vectorises without reordering any sum (tests run whole sentence
  // sets through these loops).
  Weight weight(const float* host_w, int out, int in) override {
    Weight w;
    w.out = out;
    w.in = in;
    w.data = alloc(sizeof(float) * static_cast<size_t>(out) * in);
    float* t = at<float>(w.data);
    for (int o = 0; o < out; ++o)
      for (int i = 0; i < in; ++i) t[static_cast<size_t>(i) * out + o] = host_w[static_cast<size_t>(o) * in + i];
    return w;
  }

  void linear(const Weight& w, const float* bias, const float* x, int rows, float* y, Act act) override {
    const float* Wt = at<float>(w.data);
    const size_t out = static_cast<size_t>(w.out);
    constexpr int kRows = 4;  // rows per pass over the weights
    for (int r0 = 0; r0 < rows; r0 += kRows) {
      const int nr = std::min(kRows, rows - r0);
      for (int r = 0; r < nr; ++r) std::fill(y + (r0 + r) * out, y + (r0 + r + 1) * out, 0.f);
      for (int i = 0; i < w.in; ++i) {
        const float* wi = Wt + static_cast<size_t>(i) * out;
        for (int r = 0; r < nr; ++r) {
          const float xi = x[static_cast<size_t>(r0 + r) * w.in + i];
          float* yr = y + (r0 + r) * out;
          for (size_t o = 0; o < out; ++o) yr[o] += xi * wi[o];
        }
      }
      for (int r = 0; r < nr; ++r)
        for (size_t o = 0; o < out; ++o) {
          float& v = y[(r0 + r) * out + o];
          v = activate(v + (bias ? bias[o] : 0.f), act);
        }
    }
  }

  void add_layer_norm(float* x, const float* residual, const float* gamma, const float* beta, int rows, int d,
                      float eps, float* y) override {
    for (int r = 0; r < rows; ++r) {
      float* xr = x + static_cast<size_t>(r) * d;
      float* yr = y + static_cast<size_t>(r) * d;
      if (residual)
        for (int i = 0; i < d; ++i) xr[i] += residual[static_cast<size_t>(r) * d + i];
      float mean = 0.f;
      for (int i = 0; i < d; ++i) mean += xr[i];
      mean /= static_cast<float>(d);
      float var = 0.f;
      for (int i = 0; i < d; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      var /= static_cast<float>(d);
      const float inv = 1.f / std::sqrt(var + eps);
      for (int i = 0; i < d; ++i) yr[i] = (xr[i] - mean) * inv * gamma[i] + beta[i];
    }
  }

  void add(float* x, const float* y, size_t n) override {
    for (size_t i = 0; i < n; ++i) x[i] += y[i];
  }

  void embed(const float* table, const float* pos_table, const int32_t* ids, const int32_t* positions, int T,
             int d, float scale, float* out) override {
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < d; ++i)
        out[static_cast<size_t>(t) * d + i] = table[static_cast<size_t>(ids[t]) * d + i] * scale +
                                              pos_table[static_cast<size_t>(positions[t]) * d + i];
  }

  void attention(const float* q, size_t q_stride, const float* k, const float* v, size_t pos_stride,
                 size_t batch_stride, const int32_t* row_of, const int32_t* visible, int n_q, int heads,
                 int head_dim, int, float* out, size_t out_stride) override {
    const float scale = 1.f / std::sqrt(static_cast<float>(head_dim));
    std::vector<float> s;
    for (int t = 0; t < n_q; ++t) {
      const int n = visible[t];
      const float* kr = k + static_cast<size_t>(row_of[t]) * batch_stride;
      const float* vr = v + static_cast<size_t>(row_of[t]) * batch_stride;
      s.resize(static_cast<size_t>(n));
      for (int h = 0; h < heads; ++h) {
        const size_t col = static_cast<size_t>(h) * head_dim;
        const float* qt = q + static_cast<size_t>(t) * q_stride + col;
        float top = -std::numeric_limits<float>::infinity();
        for (int p = 0; p < n; ++p) {
          float dot = 0.f;
          for (int i = 0; i < head_dim; ++i) dot += qt[i] * kr[static_cast<size_t>(p) * pos_stride + col + i];
          s[p] = dot * scale;
          top = std::max(top, s[p]);
        }
        float sum = 0.f;
        for (int p = 0; p < n; ++p) sum += (s[p] = std::exp(s[p] - top));
        float* o = out + static_cast<size_t>(t) * out_stride + col;
        for (int i = 0; i < head_dim; ++i) o[i] = 0.f;
        for (int p = 0; p < n; ++p)
          for (int i = 0; i < head_dim; ++i) o[i] += s[p] / sum * vr[static_cast<size_t>(p) * pos_stride + col + i];
      }
    }
  }

  void append(const float* src, size_t src_stride, int R, int n, size_t width, const int32_t* start, float* cache,
              size_t pos_stride, size_t batch_stride) override {
    for (int b = 0; b < R; ++b)
      for (int i = 0; i < n; ++i)
        std::memcpy(cache + static_cast<size_t>(b) * batch_stride + static_cast<size_t>(start[b] + i) * pos_stride,
                    src + static_cast<size_t>(b * n + i) * src_stride, width * sizeof(float));
  }

  void ssru(const float* proj, int R, int n, int d, const int32_t* start, float* c, size_t batch_stride,
            float* h) override {
    for (int b = 0; b < R; ++b)
      for (int i = 0; i < n; ++i) {
        const int p = start[b] + i;
        const float* x = proj + static_cast<size_t>(b * n + i) * 2 * d;
        float* cr = c + static_cast<size_t>(b) * batch_stride;
        const float* prev = p > 0 ? cr + static_cast<size_t>(p - 1) * d : nullptr;
        float* now = cr + static_cast<size_t>(p) * d;
        float* hr = h + static_cast<size_t>(b * n + i) * d;
        for (int j = 0; j < d; ++j) {
          const float f = 1.f / (1.f + std::exp(-x[d + j]));
          now[j] = f * (prev ? prev[j] : 0.f) + (1.f - f) * x[j];
          hr[j] = now[j] > 0.f ? now[j] : 0.f;
        }
      }
  }

  void add_mask(float* logits, int T, int V, const float* mask, const int32_t* mask_row) override {
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < V; ++i)
        logits[static_cast<size_t>(t) * V + i] += mask[static_cast<size_t>(mask_row[t]) * V + i];
  }

  void topk(const float* logits, int T, int V, int k, int32_t* ids, float* values, float* lse) override {
    std::vector<int32_t> order(static_cast<size_t>(V));
    for (int t = 0; t < T; ++t) {
      const float* row = logits + static_cast<size_t>(t) * V;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      for (int i = 0; i < k; ++i) {
        ids[static_cast<size_t>(t) * k + i] = order[i];
        values[static_cast<size_t>(t) * k + i] = row[order[i]];
      }
      if (lse) {
        const float top = row[order[0]];
        double sum = 0.0;
        for (int i = 0; i < V; ++i) sum += std::exp(static_cast<double>(row[i] - top));
        lse[t] = top + static_cast<float>(std::log(sum));
      }
    }
  }

  void pick(const float* logits, int T, int V, const int32_t* ids, float* out) override {
    for (int t = 0; t < T; ++t)
      out[t] = ids[t] < 0 ? -std::numeric_limits<float>::infinity() : logits[static_cast<size_t>(t) * V + ids[t]];
  }

 private:
  static float activate(float x, Act act) {
    switch (act) {
      case Act::kRelu: return x > 0.f ? x : 0.f;
      case Act::kGelu: return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752f));
      case Act::kSwish: return x / (1.f + std::exp(-x));
      default: return x;
    }
  }
};

}  // namespace

std::unique_ptr<Ops> make_reference_ops() { return std::make_unique<ReferenceOps>(); }

}  // namespace gpu
}  // namespace fastdec
