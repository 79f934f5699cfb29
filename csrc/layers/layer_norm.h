// Layer normalisation over the last dimension (eps from config.json layer_norm_eps, default 1e-5).
#pragma once
#include <vector>

#include "kernels/kernel_table.h"
#include "model/weights.h"

namespace fastdec {

class LayerNorm {
 public:
  LayerNorm() = default;
  LayerNorm(const KernelTable& kernels, const TensorLookup& lookup, const std::string& name, int d,
            float eps);
  // y may alias x.
  void forward(const float* x, int rows, float* y) const {
    kernels_->layer_norm(x, rows, d_, gamma_.data(), beta_.data(), y, eps_);
  }
  // x += residual, then y = layer_norm(x) in one pass (y may be x).
  void add_forward(float* x, const float* residual, int rows, float* y) const {
    kernels_->add_layer_norm(x, residual, rows, d_, gamma_.data(), beta_.data(), y, eps_);
  }

 private:
  const KernelTable* kernels_ = nullptr;
  int d_ = 0;
  float eps_ = 1e-5f;
  std::vector<float> gamma_, beta_;
};

}  // namespace fastdec
