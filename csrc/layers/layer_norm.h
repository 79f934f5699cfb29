// Layer normalisation over the last dimension (eps 1e-5, as torch.nn.LayerNorm).
#pragma once
#include <vector>

#include "model/weights.h"

namespace fastdec {

class LayerNorm {
 public:
  LayerNorm() = default;
  LayerNorm(const TensorLookup& lookup, const std::string& name, int d);
  // y may alias x.
  void forward(const float* x, int rows, float* y) const;

 private:
  int d_ = 0;
  std::vector<float> gamma_, beta_;
};

}  // namespace fastdec
