#include "layers/layer_norm.h"

#include <cmath>

namespace fastdec {

LayerNorm::LayerNorm(const TensorLookup& lookup, const std::string& name, int d) : d_(d) {
  TensorView g = expect_tensor(lookup, name + ".weight", "float32", {d});
  TensorView b = expect_tensor(lookup, name + ".bias", "float32", {d});
  gamma_.assign(g.f32(), g.f32() + d);
  beta_.assign(b.f32(), b.f32() + d);
}

void LayerNorm::forward(const float* x, int rows, float* y) const {
  constexpr float kEps = 1e-5f;
  for (int r = 0; r < rows; ++r) {
    const float* in = x + static_cast<size_t>(r) * d_;
    float* out = y + static_cast<size_t>(r) * d_;
    float mean = 0.f;
    for (int i = 0; i < d_; ++i) mean += in[i];
    mean /= static_cast<float>(d_);
    float var = 0.f;
    for (int i = 0; i < d_; ++i) var += (in[i] - mean) * (in[i] - mean);
    float inv = 1.f / std::sqrt(var / static_cast<float>(d_) + kEps);
    for (int i = 0; i < d_; ++i) out[i] = (in[i] - mean) * inv * gamma_[i] + beta_[i];
  }
}

}  // namespace fastdec
